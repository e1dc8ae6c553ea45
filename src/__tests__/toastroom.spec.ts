import {
  OFFSET_VAR,
  TOASTS_LEFT_CLASS,
  ToastRoom,
  toastOffset
} from '../toastroom';

describe('toastOffset: the toasts beside the panel, not over Ask', () => {
  it('moves them left of a panel on the right', () => {
    // A 300px panel and the 33px tab bar at the right of a 1280px window.
    expect(toastOffset({ left: 947, width: 300 }, 1280)).toBe(333);
  });

  it('leaves them for a hidden panel or one on the left', () => {
    expect(toastOffset({ left: 0, width: 0 }, 1280)).toBeNull();
    expect(toastOffset({ left: 33, width: 300 }, 1280)).toBeNull();
  });

  it('leaves them when no toast would fit beside the panel', () => {
    expect(toastOffset({ left: 350, width: 317 }, 700)).toBeNull();
  });
});

describe('ToastRoom', () => {
  it('marks the body while its panel is shown on the right, and unmarks it', () => {
    const node = document.createElement('div');
    document.body.appendChild(node);
    // jsdom lays nothing out: the panel's place is given here.
    Object.defineProperty(node, 'offsetParent', { get: () => document.body });
    node.getBoundingClientRect = () =>
      ({ left: 700, width: 300, top: 0, bottom: 0 }) as DOMRect;
    Object.defineProperty(window, 'innerWidth', {
      value: 1033,
      configurable: true
    });
    const room = new ToastRoom(node);
    room.update();
    expect(document.body.classList.contains(TOASTS_LEFT_CLASS)).toBe(true);
    expect(document.body.style.getPropertyValue(OFFSET_VAR)).toBe('333px');
    room.dispose();
    expect(document.body.classList.contains(TOASTS_LEFT_CLASS)).toBe(false);
    expect(document.body.style.getPropertyValue(OFFSET_VAR)).toBe('');
    node.remove();
  });
});
