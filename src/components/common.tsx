/**
 * Small pieces shared by the panel's views: what the server offers, and the
 * chip that says where a turn's suggestion stands.
 */
import * as React from 'react';

import type { NotebookSession } from '../session';
import type { StrategyInfo } from '../wire';

/** What the server offers (`GET config`); null until it answered. */
export interface IServerStrategies {
  /** Every strategy the server knows, in the order to offer them. */
  catalog: StrategyInfo[];
  /** The ones it can run now. */
  available: string[];
}

/** A strategy's name in words, from the server's catalog. */
export function strategyLabel(
  strategies: IServerStrategies | null,
  name: string
): string {
  return strategies?.catalog.find(s => s.name === name)?.label ?? name;
}

/** The chip of a turn whose suggestion edits an existing cell (`index`: 0-based). */
export function EditsCellChip(props: { index: number }) {
  return (
    <span
      className="jp-DataAgent-chip jp-DataAgent-editsCell"
      title="The suggestion replaces this cell, shown as a diff over it"
    >
      edits cell {props.index + 1}
    </span>
  );
}

export function StatusChip(props: { status: string }) {
  const labels: Record<string, string> = {
    pending: 'not decided',
    suggested: 'suggested',
    accepted: 'accepted',
    rejected: 'rejected',
    edited: 'accepted, then edited'
  };
  return (
    <span className={`jp-DataAgent-chip jp-mod-${props.status}`}>
      {labels[props.status] ?? props.status}
    </span>
  );
}

/**
 * Accept and Reject of a suggestion placed in the notebook, from the panel:
 * the live turn's and, after a reload, the stored one's (the same buttons).
 */
export function PlacedActions(props: {
  session: NotebookSession;
  turnId: string;
}) {
  const { session, turnId } = props;
  return (
    <>
      <button
        className="jp-Button jp-mod-styled jp-mod-small jp-mod-accept jp-DataAgent-panelAccept"
        onClick={() => session.suggestions.accept(turnId)}
      >
        Accept
      </button>
      <button
        className="jp-Button jp-mod-styled jp-mod-small jp-mod-reject jp-DataAgent-panelReject"
        onClick={() => session.suggestions.reject(turnId)}
      >
        Reject
      </button>
    </>
  );
}
