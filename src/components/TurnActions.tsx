/**
 * Under a finished turn: ask it again, and find its cells in the notebook.
 */
import * as React from 'react';

import type { IRetryRequest, NotebookSession } from '../session';

export function TurnActions(props: {
  session: NotebookSession;
  /** What a retry asks again (an edit turn edits its cell again). */
  retry: IRetryRequest;
  turnId: string | null;
  /** How many of the notebook's cells hold this turn's code. */
  cells: number;
  /** A request is running: no retry until it ends. */
  busy: boolean;
}) {
  const { session, retry, turnId, cells, busy } = props;
  return (
    <div className="jp-DataAgent-turnActions">
      {turnId && cells > 0 && (
        <button
          type="button"
          className="jp-DataAgent-link jp-DataAgent-showCells"
          title="Scroll the notebook to this turn's cells and select them"
          onClick={() => session.showInNotebook(turnId)}
        >
          Show in notebook
        </button>
      )}
      <button
        type="button"
        className="jp-DataAgent-link jp-DataAgent-retry"
        title="Ask the same question again, with the same strategy"
        disabled={busy}
        onClick={() => session.retry(retry)}
      >
        Retry
      </button>
    </div>
  );
}
