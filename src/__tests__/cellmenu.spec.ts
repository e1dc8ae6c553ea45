import { activateCellOnContextMenu, explainQuestion } from '../cellmenu';

function notebook(cells: number) {
  const node = document.createElement('div');
  const widgets = Array.from({ length: cells }, () => {
    const cell = document.createElement('div');
    const editor = document.createElement('pre');
    cell.appendChild(editor);
    node.appendChild(cell);
    return { node: cell };
  });
  document.body.appendChild(node);
  return { node, widgets, activeCellIndex: 0 };
}

const rightClick = (target: Element) =>
  target.dispatchEvent(
    new MouseEvent('contextmenu', { bubbles: true, cancelable: true })
  );

describe('a right-click on a cell (N2)', () => {
  it('makes that cell the active one before the menu reads it', () => {
    const nb = notebook(3);
    const seen: number[] = [];
    // The menu's own listener runs after the capture phase.
    nb.node.addEventListener('contextmenu', () =>
      seen.push(nb.activeCellIndex)
    );
    const handle = activateCellOnContextMenu(nb);
    rightClick(nb.widgets[2].node.firstElementChild!);
    expect(nb.activeCellIndex).toBe(2);
    expect(seen).toEqual([2]);
    // Outside any cell: nothing changes.
    rightClick(nb.node);
    expect(nb.activeCellIndex).toBe(2);
    handle.dispose();
    rightClick(nb.widgets[0].node);
    expect(nb.activeCellIndex).toBe(2);
    expect(handle.isDisposed).toBe(true);
    nb.node.remove();
  });

  it('Explain names the cell it is about', () => {
    expect(explainQuestion(2)).toBe('Explain cell 3');
    expect(explainQuestion(-1)).toBe('Explain this cell');
  });
});
