/**
 * JupyterLab's notifications (toasts: the first start's "official Jupyter
 * news?" question, warnings) stack at the bottom right of the window, which
 * is where a sidebar on the right has the composer's Ask / Stop button.
 * While the panel is shown along the right edge, the toasts sit to its
 * left instead: they stay readable and the button stays clickable, and no
 * setting of the user's (their news preference) is touched.
 */
import { IDisposable } from '@lumino/disposable';

/** On the body while the toasts are moved; their offset in OFFSET_VAR. */
export const TOASTS_LEFT_CLASS = 'jp-DataAgent-toastsLeft';
export const OFFSET_VAR = '--jp-data-agent-toast-right';
/** About one toast's width (react-toastify's 320px, plus margins). */
const TOAST_ROOM = 360;

/**
 * How far from the window's right edge the toasts go so that they clear
 * the panel; null: leave them where they are (the panel is hidden, is not
 * on the right, or leaves no room for a toast beside it).
 */
export function toastOffset(
  panel: { left: number; width: number },
  windowWidth: number,
  room: number = TOAST_ROOM
): number | null {
  if (panel.width <= 0 || panel.left < windowWidth / 2) {
    return null;
  }
  const offset = Math.ceil(windowWidth - panel.left);
  return windowWidth - offset >= room ? offset : null;
}

/** Keeps the toasts clear of one panel's node; `update` when it moves. */
export class ToastRoom implements IDisposable {
  constructor(private _node: HTMLElement) {
    window.addEventListener('resize', this._update);
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Measure the panel again (shown, hidden, resized). */
  update(): void {
    this._update();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    window.removeEventListener('resize', this._update);
    this._apply(null);
  }

  private _update = (): void => {
    const shown = this._node.isConnected && this._node.offsetParent !== null;
    const rect = this._node.getBoundingClientRect();
    this._apply(
      shown
        ? toastOffset({ left: rect.left, width: rect.width }, window.innerWidth)
        : null
    );
  };

  private _apply(offset: number | null): void {
    const body = document.body;
    body.classList.toggle(TOASTS_LEFT_CLASS, offset !== null);
    if (offset === null) {
      body.style.removeProperty(OFFSET_VAR);
    } else {
      body.style.setProperty(OFFSET_VAR, `${offset}px`);
    }
  }

  private _disposed = false;
}
