/**
 * The running turn's progress line: what runs now (N8), counts in words.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { Progress } from '../components/Progress';
import { initialJob, IJobView, reduceJob } from '../events';
import type { JobEvent, ProgressData } from '../wire';

(globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;

const progress = (seq: number, message: string, data: ProgressData): JobEvent =>
  ({
    version: 1,
    job_id: 'j',
    seq,
    type: 'progress',
    message,
    data
  }) as JobEvent;

describe('Progress', () => {
  let node: HTMLElement;
  let host: Widget | null = null;
  afterEach(() => {
    React.act(() => host?.dispose());
    host = null;
  });
  const show = (job: IJobView) => {
    host = ReactWidget.create(<Progress job={job} rendermime={null as any} />);
    React.act(() => Widget.attach(host!, document.body));
    node = host.node;
  };

  it('says the candidate runs in a copy once the model has answered', () => {
    let job = reduceJob(
      initialJob('j'),
      progress(1, 'asking the model for 1 candidate (prompt 900 tokens)', {
        state: 'prompt'
      })
    );
    job = reduceJob(
      job,
      progress(2, 'running the candidate in a kernel copy', {
        state: 'running'
      })
    );
    show(job);
    expect(
      node.querySelector('.jp-DataAgent-progressMessage')?.textContent
    ).toBe('running the candidate in a kernel copy');
  });

  it('counts one node and one vote in the singular', () => {
    const job = reduceJob(
      initialJob('j'),
      progress(1, 'iteration 1', {
        iterations: 1,
        nodes: 1,
        answers: [{ answer: '42', votes: 1 }]
      } as ProgressData)
    );
    show(job);
    const text = node.querySelector('.jp-DataAgent-search')?.textContent;
    expect(text).toContain('1 node');
    expect(text).not.toContain('1 nodes');
    expect(text).toContain('42 — 1 vote');
    expect(text).not.toContain('1 votes');
  });
});
