/**
 * Bringing a suggestion into view in the notebook: all of its cells when
 * they fit, else the top of the first one, where its bar (Accept, Reject)
 * is. JupyterLab's `scrollToItem` aligns a cell taller than the view (a
 * fix's diff over a cell with a long traceback) by its end, which put the
 * bar above the view.
 */

/** A vertical extent in one coordinate system (the page's). */
export interface IExtent {
  top: number;
  bottom: number;
}

/**
 * How far to scroll (pixels, positive: down) so that `block` shows in
 * `view`: the least move that shows all of it, or, when it is taller than
 * the view (less `margin` at each end), its top at the view's top.
 */
export function revealDelta(view: IExtent, block: IExtent, margin = 8): number {
  const top = view.top + margin;
  const bottom = view.bottom - margin;
  if (block.top < top || block.bottom - block.top > bottom - top) {
    return block.top - top;
  }
  if (block.bottom > bottom) {
    return block.bottom - bottom;
  }
  return 0;
}

/** Scroll `scroller` so that the block from `first`'s top to `last`'s bottom shows. */
export function revealBlock(
  scroller: HTMLElement,
  first: HTMLElement,
  last: HTMLElement
): void {
  const view = scroller.getBoundingClientRect();
  const delta = revealDelta(
    { top: view.top, bottom: view.bottom },
    {
      top: first.getBoundingClientRect().top,
      bottom: last.getBoundingClientRect().bottom
    }
  );
  if (delta) {
    scroller.scrollTop += delta;
  }
}
