/**
 * One button of a suggestion's bar (the one-cell bar and the analysis's review bar).
 */

/**
 * A small styled button appended to `parent`; `name` is its action (class and data-action).
 * The mousedown stays with the button: the notebook would take it for a cell selection drag.
 */
export function barButton(
  parent: HTMLElement,
  name: string,
  text: string,
  title: string,
  onClick: () => void,
  cls = ''
): HTMLButtonElement {
  const button = document.createElement('button');
  button.type = 'button';
  button.className = `jp-Button jp-mod-styled jp-mod-small jp-DataAgent-${name} ${cls}`;
  button.textContent = text;
  button.title = title;
  button.dataset.action = name;
  button.addEventListener('mousedown', event => event.stopPropagation());
  button.addEventListener('click', event => {
    event.preventDefault();
    event.stopPropagation();
    onClick();
  });
  parent.appendChild(button);
  return button;
}
