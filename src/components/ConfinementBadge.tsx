/**
 * The verdict on a turn's kernel copies (confined, partially, not
 * executed), with the list of confinement layers on hover and focus.
 */
import * as React from 'react';

import { CONFINEMENT_LABELS, LAYER_LABELS, TRANSPORT_LABELS } from '../models';
import type { Confinement } from '../wire';

let confinementIds = 0;

/**
 * The verdict on one turn's kernel copies: a badge whose layer list shows
 * while the pointer is on the badge and while it has focus (a tab stop,
 * described by the list; a click or a tap focuses it too, and a click
 * elsewhere closes it). Escape hides it.
 */
export function ConfinementBadge(props: { confinement: Confinement }) {
  const { confinement } = props;
  const [id] = React.useState(
    () => `jp-DataAgent-confinement-${++confinementIds}`
  );
  // Where the list goes: placed against the panel's body (not the scrolling
  // conversation, which would clip it), below the badge or above it, within
  // the conversation's box: never over the composer and its Ask.
  const [place, setPlace] = React.useState<React.CSSProperties | undefined>(
    undefined
  );
  const wrap = React.useRef<HTMLSpanElement>(null);
  const measure = () => {
    const node = wrap.current;
    const badge = node?.querySelector('.jp-DataAgent-confinement');
    const details = node?.querySelector('.jp-DataAgent-confinementDetails');
    const row = node?.closest('.jp-DataAgent-intent') ?? badge;
    const body = node?.closest('.jp-DataAgent-body');
    if (!badge || !details || !row || !body) {
      return;
    }
    const a = badge.getBoundingClientRect();
    const r = row.getBoundingClientRect();
    const b = body.getBoundingClientRect();
    const room = (
      node?.closest('.jp-DataAgent-conversation') ?? body
    ).getBoundingClientRect();
    const below = room.bottom - a.bottom - 4;
    const above = a.top - room.top - 4;
    // Hover and focus styles already apply here, so the list has its height.
    const needed = details.scrollHeight + 2;
    const up = needed > below && above > below;
    setPlace({
      left: r.left - b.left,
      width: r.width,
      maxHeight: Math.max(40, Math.floor(up ? above : below)),
      // Flush with the badge: no gap for the pointer to fall through.
      ...(up ? { bottom: b.bottom - a.top } : { top: a.bottom - b.top })
    });
  };
  React.useEffect(() => {
    // Follow the badge when the conversation scrolls under an open list.
    const scroller = wrap.current?.closest('.jp-DataAgent-conversation');
    if (!scroller) {
      return;
    }
    const onScroll = () => {
      const node = wrap.current;
      if (node && (node.matches(':hover') || node.matches(':focus-within'))) {
        measure();
      }
    };
    scroller.addEventListener('scroll', onScroll, { passive: true });
    return () => scroller.removeEventListener('scroll', onScroll);
  }, []);
  const label = CONFINEMENT_LABELS[confinement.status];
  const on = confinement.layers.filter(l => l.on).length;
  const total = confinement.layers.length;
  const summary = total ? `${on} of ${total} layers on` : 'no kernel copy';
  const where = TRANSPORT_LABELS[confinement.transport] ?? '';
  return (
    <span
      ref={wrap}
      className="jp-DataAgent-confinementWrap"
      onMouseEnter={measure}
      onFocus={measure}
    >
      <button
        type="button"
        className={`jp-DataAgent-confinement jp-mod-${confinement.status}${
          confinement.missing.length ? ' jp-mod-missing' : ''
        }`}
        aria-label={`Kernel copies: ${label}, ${summary}${
          where ? `, ${where}` : ''
        }, policy ${confinement.policy}`}
        aria-describedby={id}
        data-status={confinement.status}
        data-transport={confinement.transport}
        onKeyDown={event => {
          if (event.key === 'Escape') {
            event.currentTarget.blur();
          }
        }}
      >
        {label}
      </button>
      <div
        id={id}
        role="tooltip"
        className="jp-DataAgent-confinementDetails"
        style={place}
      >
        <div className="jp-DataAgent-confinementTitle">
          Kernel copies: {label}{' '}
          <span className="jp-DataAgent-confinementPolicy">
            policy “{confinement.policy}”
          </span>
        </div>
        {where && (
          <div className="jp-DataAgent-confinementTransport">{where}</div>
        )}
        {confinement.message && (
          <div className="jp-DataAgent-confinementMessage">
            {confinement.message}
          </div>
        )}
        {total > 0 && <LayerList layers={confinement.layers} />}
      </div>
    </span>
  );
}

/** Each confinement layer of the copies: on or off, and why. */
function LayerList(props: { layers: Confinement['layers'] }) {
  return (
    <ul className="jp-DataAgent-layers">
      {props.layers.map(layer => (
        <li
          key={layer.name}
          className={`jp-DataAgent-layer jp-mod-${layer.on ? 'on' : 'off'}`}
          data-layer={layer.name}
        >
          <span className="jp-DataAgent-layerMark" aria-hidden="true">
            {layer.on ? '✓' : '✗'}
          </span>
          <span className="jp-DataAgent-layerName">
            {LAYER_LABELS[layer.name] ?? layer.name}
          </span>
          <span className="jp-DataAgent-layerState">
            {layer.on ? 'on' : 'off'}
          </span>
          {layer.detail && (
            <span className="jp-DataAgent-layerDetail">{layer.detail}</span>
          )}
        </li>
      ))}
    </ul>
  );
}
