/**
 * One request of the conversation while the panel follows it: the
 * question, its progress, the candidates (tabs, status, Insert, Accept and
 * Reject) and what it cost.
 *
 * Memoized: exchanges are immutable (a change makes a new one) and every
 * prop is a value that changes only when what it shows changes, so an event
 * of one request re-renders that request alone.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import * as React from 'react';

import { isFinished } from '../events';
import type { IExchange, IRetryRequest } from '../exchange';
import type { TurnStatus } from '../metadata';
import { EXPLAIN } from '../models';
import type { NotebookSession } from '../session';
import type { ISuggestionState } from '../suggestions';
import { IPrices, usageOfResult } from '../usage';
import type { Confinement } from '../wire';
import { MarkdownBlock } from './blocks';
import { CandidateView } from './CandidateView';
import {
  EditsCellChip,
  IServerStrategies,
  PlacedActions,
  StatusChip,
  strategyLabel
} from './common';
import { ConfinementBadge } from './ConfinementBadge';
import { Progress } from './Progress';
import { StateAgeNote } from './StateAgeNote';
import { TurnActions } from './TurnActions';
import { UsageLine } from './UsageLine';

export interface IExchangeViewProps {
  session: NotebookSession;
  exchange: IExchange;
  rendermime: IRenderMimeRegistry;
  strategies: IServerStrategies | null;
  /** The server's prices: a turn's cost is its own model's. */
  prices: IPrices;
  /** Its suggestion in the notebook (states are immutable too); null: none. */
  suggestion: ISuggestionState | null;
  /** The decision stored for its turn; null: not stored. */
  turnStatus: TurnStatus | null;
  /** The stored verdict on kernel copies, where the job has none. */
  storedConfinement: Confinement | null;
  /** The position of the cell it edits; -1: none (or gone). */
  editCellIndex: number;
  /** How many of the notebook's cells hold its code. */
  turnCells: number;
  /** A request is running (this one or another). */
  busy: boolean;
}

function ExchangeViewImpl(props: IExchangeViewProps) {
  const {
    session,
    exchange,
    rendermime,
    strategies,
    prices,
    suggestion,
    editCellIndex,
    turnCells,
    busy
  } = props;
  const job = exchange.job;
  const candidates = job.candidates;
  // The panel shows what the notebook shows once the candidate is placed.
  const shown =
    suggestion &&
    (suggestion.status === 'suggested' || suggestion.status === 'accepted')
      ? suggestion.index
      : exchange.selected;
  const selected = Math.min(shown, Math.max(0, candidates.length - 1));
  const placed = suggestion?.status === 'suggested';
  const status = placed ? 'suggested' : (props.turnStatus ?? undefined);
  // An explanation runs no code: no verdict on kernel copies to show.
  const confinement =
    exchange.strategy === EXPLAIN
      ? null
      : (job.confinement ?? props.storedConfinement ?? null);
  const retry = retryOf(exchange);
  return (
    <div className="jp-DataAgent-exchange" data-turn-id={exchange.turnId ?? ''}>
      <div className="jp-DataAgent-intent">
        <span className="jp-DataAgent-intentText">{exchange.intent}</span>
        <span className="jp-DataAgent-chip">
          {strategyLabel(strategies, exchange.strategy)}
        </span>
        {exchange.editCellId && editCellIndex >= 0 && (
          <EditsCellChip index={editCellIndex} />
        )}
        {confinement && <ConfinementBadge confinement={confinement} />}
      </div>
      <StateAgeNote
        job={job}
        busy={busy}
        onWaitForCell={() => session.retry({ ...retry, freshState: true })}
      />
      <Progress
        job={job}
        rendermime={rendermime}
        onAnswerNow={() => void session.answerFromText()}
      />
      {job.result?.stats.estimator && (
        <div
          className="jp-DataAgent-note jp-DataAgent-estimator"
          title="What valued the search's steps: the execution heuristic, or a value model trained from your decisions"
        >
          Search guided by {job.result.stats.estimator}
        </div>
      )}
      {job.status === 'error' && (
        <div className="jp-DataAgent-error">{job.error}</div>
      )}
      {job.status === 'cancelled' && (
        <div className="jp-DataAgent-note">Stopped.</div>
      )}
      {job.result?.answer && (
        <AnswerBlock
          answer={job.result.answer}
          prose={job.result.strategy === EXPLAIN || !candidates.length}
          rendermime={rendermime}
        />
      )}
      {isFinished(job) &&
        job.status === 'done' &&
        !candidates.length &&
        !job.result?.answer && (
          <div className="jp-DataAgent-note">No candidate came back.</div>
        )}
      {candidates.length > 0 && (
        <div className="jp-DataAgent-candidates">
          <LiveCandidateBar
            session={session}
            exchange={exchange}
            selected={selected}
            placed={placed}
            status={status}
          />
          <CandidateView
            candidate={candidates[selected]}
            index={selected}
            total={candidates.length}
            chosen={job.chosen === selected}
            classes={job.result?.stats.classes ?? []}
            rendermime={rendermime}
            confinement={confinement}
          />
        </div>
      )}
      {job.result && (
        <UsageLine
          className="jp-DataAgent-usage"
          usage={usageOfResult(job.result)}
          prices={prices}
          context={job.result.stats.context ?? null}
        />
      )}
      {isFinished(job) && (
        <TurnActions
          session={session}
          retry={retry}
          turnId={exchange.turnId}
          cells={turnCells}
          busy={busy}
        />
      )}
    </div>
  );
}

/** What Retry (and "Wait for the cell and run again") under a turn asks again. */
function retryOf(exchange: IExchange): IRetryRequest {
  return {
    intent: exchange.intent,
    strategy: exchange.strategy,
    cellId: exchange.anchorCellId,
    editCellId: exchange.editCellId,
    editKind: exchange.editKind,
    instruction: exchange.instruction
  };
}

export const ExchangeView = React.memo(ExchangeViewImpl);
ExchangeView.displayName = 'ExchangeView';

/** The candidates' tabs, the turn's status and what can be done with the one shown. */
function LiveCandidateBar(props: {
  session: NotebookSession;
  exchange: IExchange;
  selected: number;
  placed: boolean;
  status: TurnStatus | 'suggested' | undefined;
}) {
  const { session, exchange, selected, placed, status } = props;
  const job = exchange.job;
  const candidates = job.candidates;
  return (
    <div
      className="jp-DataAgent-candidateBar"
      role="tablist"
      aria-label="Candidates"
    >
      {candidates.length > 1 &&
        candidates.map((c, i) => (
          <button
            key={i}
            role="tab"
            aria-selected={i === selected}
            className={`jp-DataAgent-tab${i === selected ? ' jp-mod-selected' : ''}${
              c.result && c.result.status !== 'ok' ? ' jp-mod-failed' : ''
            }`}
            onClick={() => session.select(exchange, i)}
            title={`Candidate ${i + 1}`}
          >
            {i + 1}
          </button>
        ))}
      <span className="jp-DataAgent-spacer" />
      {status && <StatusChip status={status} />}
      {isFinished(job) &&
        exchange.turnId &&
        !placed &&
        status !== 'accepted' &&
        status !== 'edited' && (
          <button
            className="jp-Button jp-mod-styled jp-mod-small jp-mod-accept jp-DataAgent-insert"
            onClick={() => session.insert(exchange, selected)}
            title={
              exchange.editCellId
                ? 'Show as a diff over the cell it edits'
                : 'Insert below the active cell as a suggestion'
            }
          >
            {exchange.editCellId ? 'Show diff' : 'Insert'}
          </button>
        )}
      {placed && exchange.turnId && (
        <PlacedActions session={session} turnId={exchange.turnId} />
      )}
    </div>
  );
}

/** A turn's answer: prose read in the panel, or the one-line answer of a search. */
function AnswerBlock(props: {
  answer: string;
  prose: boolean;
  rendermime: IRenderMimeRegistry;
}) {
  return props.prose ? (
    // Prose about the cell, or a question answered in words: read
    // here, nothing goes into the notebook.
    <MarkdownBlock
      source={props.answer}
      rendermime={props.rendermime}
      className="jp-DataAgent-prose"
    />
  ) : (
    <div className="jp-DataAgent-answer">
      Answer: <strong>{props.answer}</strong>
    </div>
  );
}
