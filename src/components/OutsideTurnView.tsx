/**
 * A turn on this notebook started elsewhere (`%%agent`, an MCP or ACP
 * client, Jupyter AI, the sidebar in another tab): labelled by its source,
 * with its question, strategy and status. Its header is a button that
 * loads the turn's events and shows its result as the panel shows its own
 * (the `children`: the exchange's view, with Insert).
 */
import * as React from 'react';

import type { NotebookSession } from '../session';
import { IOutsideTurn, TurnSummary, sourceLabel } from '../turnlist';

const STATUS_TEXT: Record<TurnSummary['status'], string> = {
  running: 'running',
  done: 'done',
  error: 'failed',
  cancelled: 'stopped'
};

export function OutsideTurnView(props: {
  session: NotebookSession;
  outside: IOutsideTurn;
  children?: React.ReactNode;
}) {
  const { session, outside } = props;
  const { summary, replay } = outside;
  const open = replay.kind !== 'closed';
  return (
    <div
      className="jp-DataAgent-outsideTurn"
      data-source={summary.source}
      data-job-id={summary.job_id}
    >
      <button
        type="button"
        className="jp-DataAgent-outsideTurn-header"
        aria-expanded={open}
        title={open ? 'Hide its result' : 'Show its result'}
        onClick={() => void session.openOutsideTurn(summary.job_id, !open)}
      >
        <span className="jp-DataAgent-outsideTurn-source">
          {sourceLabel(summary)}
        </span>
        <span className="jp-DataAgent-outsideTurn-intent">
          {summary.intent || '(no question)'}
        </span>
        <span className="jp-DataAgent-outsideTurn-meta">
          {summary.strategy} · {STATUS_TEXT[summary.status] ?? summary.status}
        </span>
      </button>
      {replay.kind === 'loading' && (
        <div className="jp-DataAgent-outsideTurn-note">Loading its result…</div>
      )}
      {replay.kind === 'expired' && (
        <div className="jp-DataAgent-outsideTurn-note" role="status">
          This turn has expired on the server.
        </div>
      )}
      {replay.kind === 'failed' && (
        <div className="jp-DataAgent-outsideTurn-note" role="status">
          Could not load this turn: {replay.reason}
        </div>
      )}
      {replay.kind === 'shown' && props.children}
    </div>
  );
}
