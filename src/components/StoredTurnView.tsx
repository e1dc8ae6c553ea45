/**
 * A turn read back from the notebook (no live job): its question, the
 * decision, its code and the outputs stored with it.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import * as React from 'react';

import { ITurn } from '../metadata';
import type { NotebookSession } from '../session';
import { CodeBlock, MarkdownBlock, OutputsView } from './blocks';
import { IServerStrategies, StatusChip, strategyLabel } from './common';
import { ConfinementBadge } from './ConfinementBadge';
import { TurnActions } from './TurnActions';

/** A turn read back from the notebook (no live job): intent, decision, code. */
export function StoredTurnView(props: {
  turn: ITurn;
  session: NotebookSession;
  rendermime: IRenderMimeRegistry;
  strategies: IServerStrategies | null;
}) {
  const { turn, session, rendermime, strategies } = props;
  const suggestion = session.suggestions.suggestion(turn.turn_id);
  const placed = suggestion?.status === 'suggested';
  const status = placed ? 'suggested' : turn.status;
  const index = placed
    ? suggestion.index
    : Math.max(0, turn.candidates.indexOf(turn.code));
  const code = placed ? (turn.candidates[index] ?? turn.code) : turn.code;
  const explanation = turn.explanations?.[index];
  // The stored outputs belong to the candidate as it ran, not to an edit.
  const preview =
    code === turn.candidates[index] ? turn.previews?.[index] : undefined;
  const failure = turn.failure;
  return (
    <div
      className="jp-DataAgent-exchange jp-mod-stored"
      data-turn-id={turn.turn_id}
    >
      <div className="jp-DataAgent-intent">
        <span className="jp-DataAgent-intentText">{turn.intent}</span>
        {turn.strategy && (
          <span className="jp-DataAgent-chip">
            {strategyLabel(strategies, turn.strategy)}
          </span>
        )}
        {turn.confinement && (
          <ConfinementBadge confinement={turn.confinement} />
        )}
      </div>
      {failure?.status === 'error' && (
        <div className="jp-DataAgent-error">
          {failure.reason || 'The request failed.'}
        </div>
      )}
      {failure?.status === 'cancelled' && (
        <div className="jp-DataAgent-note">
          Stopped.{failure.reason ? ` ${failure.reason}` : ''}
        </div>
      )}
      {(turn.candidates.length > 0 || !failure) && (
        <div className="jp-DataAgent-candidateBar">
          {turn.candidates.length > 1 && (
            <span className="jp-DataAgent-facts">
              {placed
                ? `candidate ${index + 1} of ${turn.candidates.length}`
                : `${turn.candidates.length} candidates`}
            </span>
          )}
          <span className="jp-DataAgent-spacer" />
          <StatusChip status={status} />
        </div>
      )}
      {explanation && (
        <MarkdownBlock
          source={explanation}
          rendermime={rendermime}
          className="jp-DataAgent-explanation"
        />
      )}
      {code && <CodeBlock code={code} rendermime={rendermime} />}
      {preview &&
        (preview.length ? (
          <OutputsView outputs={preview} rendermime={rendermime} />
        ) : (
          <div className="jp-DataAgent-noOutput">Ran without output</div>
        ))}
      <TurnActions
        session={session}
        retry={{
          intent: turn.intent,
          strategy: turn.strategy ?? session.strategy,
          cellId: null,
          editCellId: turn.edits_cell ?? null,
          editKind: turn.edit_kind ?? null,
          instruction: turn.instruction ?? ''
        }}
        turnId={turn.turn_id}
        cells={session.turnCellIds(turn.turn_id).length}
        busy={!!session.running}
      />
    </div>
  );
}
