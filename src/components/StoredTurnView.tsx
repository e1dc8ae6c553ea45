/**
 * A turn read back from the notebook (no live job): its question, the
 * decision, its code and the outputs stored with it.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import * as React from 'react';

import { IStoredRun, ITurn } from '../metadata';
import type { NotebookSession } from '../session';
import type { IPrices } from '../usage';
import { CodeBlock, MarkdownBlock, OutputsView } from './blocks';
import { Explanation, runBadge, voteSummary } from './CandidateView';
import {
  EditsCellChip,
  IServerStrategies,
  PlacedActions,
  StatusChip,
  strategyLabel
} from './common';
import { ChangesLine } from './ChangesLine';
import { ConfinementBadge } from './ConfinementBadge';
import { TurnActions } from './TurnActions';
import { UsageLine } from './UsageLine';

/** A turn read back from the notebook (no live job): intent, decision, code. */
export function StoredTurnView(props: {
  turn: ITurn;
  session: NotebookSession;
  rendermime: IRenderMimeRegistry;
  strategies: IServerStrategies | null;
  prices: IPrices;
}) {
  const { turn, session, rendermime, strategies } = props;
  const suggestion = session.suggestions.suggestion(turn.turn_id);
  const placed = suggestion?.status === 'suggested';
  const status = placed ? 'suggested' : turn.status;
  const decided = placed
    ? suggestion.index
    : Math.max(0, turn.candidates.indexOf(turn.code));
  // The other candidates can be read too (tabs), as before the reload.
  const [browsed, browse] = React.useState<number | null>(null);
  const index = placed || browsed === null ? decided : browsed;
  const code =
    placed || browsed !== null
      ? (turn.candidates[index] ?? turn.code)
      : turn.code;
  const run = turn.runs?.[index] ?? null;
  const vote =
    run && turn.candidates.length > 1 && run.support > 1
      ? voteSummary(run.support, turn.classes ?? [])
      : null;
  const editIndex = session.cellIndex(turn.edits_cell ?? null);
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
        {turn.edits_cell && editIndex >= 0 && (
          <EditsCellChip index={editIndex} />
        )}
        {turn.confinement && (
          <ConfinementBadge confinement={turn.confinement} />
        )}
      </div>
      {turn.answer && (
        <MarkdownBlock
          source={turn.answer}
          rendermime={rendermime}
          className="jp-DataAgent-prose"
        />
      )}
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
      {(turn.candidates.length > 0 || (!failure && !turn.answer)) && (
        <StoredCandidateBar
          turn={turn}
          index={index}
          placed={placed}
          status={status}
          browse={browse}
          session={session}
        />
      )}
      {run && <RunHead run={run} vote={vote?.text ?? null} />}
      {run?.changes && code === turn.candidates[index] && (
        <ChangesLine changes={run.changes} />
      )}
      <Explanation
        steps={turn.steps?.[index] ?? []}
        explanation={turn.explanations?.[index]}
        rendermime={rendermime}
      />
      {code && <CodeBlock code={code} rendermime={rendermime} />}
      {preview &&
        (preview.length ? (
          <OutputsView outputs={preview} rendermime={rendermime} />
        ) : (
          <div className="jp-DataAgent-noOutput">Ran without output</div>
        ))}
      {turn.usage && (
        <UsageLine
          className="jp-DataAgent-usage"
          usage={turn.usage}
          prices={props.prices}
          context={turn.context ?? null}
        />
      )}
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

/** The stored candidates as tabs (or which one is shown, while placed) and the turn's status. */
function StoredCandidateBar(props: {
  turn: ITurn;
  index: number;
  placed: boolean;
  status: React.ComponentProps<typeof StatusChip>['status'];
  browse: (index: number) => void;
  session: NotebookSession;
}) {
  const { turn, index, placed } = props;
  return (
    <div
      className="jp-DataAgent-candidateBar"
      role="tablist"
      aria-label="Candidates"
    >
      {turn.candidates.length > 1 &&
        (placed ? (
          <span className="jp-DataAgent-facts">
            candidate {index + 1} of {turn.candidates.length}
          </span>
        ) : (
          turn.candidates.map((_, i) => (
            <button
              key={i}
              role="tab"
              aria-selected={i === index}
              className={`jp-DataAgent-tab${i === index ? ' jp-mod-selected' : ''}${
                turn.runs?.[i] && turn.runs[i]!.status !== 'ok'
                  ? ' jp-mod-failed'
                  : ''
              }`}
              onClick={() => props.browse(i)}
              title={`Candidate ${i + 1}`}
            >
              {i + 1}
            </button>
          ))
        ))}
      <span className="jp-DataAgent-spacer" />
      <StatusChip status={props.status} />
      {/* Still placed after a reload: decided here as before it (m5). */}
      {placed && (
        <PlacedActions session={props.session} turnId={turn.turn_id} />
      )}
    </div>
  );
}

/** How the candidate shown ran in its kernel copy, and what the vote says. */
function RunHead(props: { run: IStoredRun; vote: string | null }) {
  const { run, vote } = props;
  return (
    <div className="jp-DataAgent-candidateHead">
      <span className={`jp-DataAgent-status jp-mod-${run.status}`}>
        {runBadge(run)}
      </span>
      {(vote || run.repaired) && (
        <span className="jp-DataAgent-facts">
          {[vote, run.repaired ? 'repaired' : ''].filter(Boolean).join(' · ')}
        </span>
      )}
    </div>
  );
}
