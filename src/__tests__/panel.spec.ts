import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { disposeHosted, voteSummary } from '../panel';

/** A widget that records the detach messages it gets. */
class Recorder extends Widget {
  seen: string[] = [];
  protected onBeforeDetach(msg: Message): void {
    this.seen.push(msg.type);
  }
  protected onAfterDetach(msg: Message): void {
    this.seen.push(msg.type);
  }
}

describe('disposeHosted', () => {
  it('takes down a widget whose host React already removed', () => {
    const host = document.createElement('div');
    document.body.appendChild(host);
    const widget = new Recorder();
    Widget.attach(widget, host);
    // An ancestor unmounted: the host leaves the document before cleanup runs.
    host.remove();
    // What the panel used to do, and what unmounted it.
    const plain = new Recorder();
    const other = document.createElement('div');
    document.body.appendChild(other);
    Widget.attach(plain, other);
    other.remove();
    expect(() => plain.dispose()).toThrow('Widget is not attached');

    expect(() => disposeHosted(widget)).not.toThrow();
    expect(widget.isDisposed).toBe(true);
    expect(widget.isAttached).toBe(false);
    expect(widget.seen).toEqual(['before-detach', 'after-detach']);
  });

  it('detaches a widget still in the document the usual way', () => {
    const host = document.createElement('div');
    document.body.appendChild(host);
    const widget = new Recorder();
    Widget.attach(widget, host);
    disposeHosted(widget);
    expect(widget.isDisposed).toBe(true);
    expect(host.contains(widget.node)).toBe(false);
    expect(widget.seen).toEqual(['before-detach', 'after-detach']);
    // Twice is harmless (React may clean up after an error elsewhere).
    expect(() => disposeHosted(widget)).not.toThrow();
  });
});

describe('voteSummary', () => {
  it('says how many samples agree and the sizes of the classes', () => {
    const vote = voteSummary(3, [3, 1, 1]);
    expect(vote?.text).toBe('3 of 5 agree (classes 3 · 1 · 1)');
    expect(vote?.title).toContain('Samples whose outputs were the same answer');
    expect(vote?.title).toContain('3 of the 5 samples that voted');
    expect(vote?.title).toContain('3, 1, 1');
  });

  it('leaves the classes out when there was only one', () => {
    const vote = voteSummary(4, [4]);
    expect(vote?.text).toBe('4 of 4 agree');
    expect(vote?.title).not.toContain('classes');
  });

  it('speaks of a lone sample in the singular', () => {
    expect(voteSummary(1, [1])?.title).toContain('1 of the 1 sample that');
  });

  it('shows a losing class too', () => {
    expect(voteSummary(2, [3, 2])?.text).toBe('2 of 5 agree (classes 3 · 2)');
  });

  it('is null when nothing voted', () => {
    expect(voteSummary(1, [])).toBeNull();
    expect(voteSummary(2, [0])).toBeNull();
  });
});
