/**
 * The sidebar chat panel. It renders the session of the current notebook;
 * code is highlighted and outputs rendered by JupyterLab's own rendermime,
 * so the panel follows the theme and renders outputs like the notebook.
 */
import { Clipboard, Dialog, showDialog } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import type * as nbformat from '@jupyterlab/nbformat';
import {
  OutputArea,
  OutputAreaModel,
  SimplifiedOutputArea
} from '@jupyterlab/outputarea';
import {
  IRenderMime,
  IRenderMimeRegistry,
  MimeModel
} from '@jupyterlab/rendermime';
import { HTMLSelect, ReactWidget } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { formatElapsed, IJobView, isFinished } from './events';
import { IStoredOutput, ITurn } from './metadata';
import {
  CONFINEMENT_LABELS,
  EXPLAIN,
  LAYER_LABELS,
  Strategy,
  intentProblem,
  previewOutputs
} from './models';
import { useMentions } from './mentions';
import { IAgentSettings, IExchange, NotebookSession } from './session';
import {
  contextFill,
  contextLabel,
  contextTitle,
  contextWasCut,
  IUsage,
  totalUsage,
  usageOf,
  usageParts,
  usageTitle
} from './usage';
import type {
  Candidate,
  Confinement,
  ContextReport,
  ModelPrice,
  StrategyInfo
} from './wire';

export const PANEL_ID = 'jupyter-data-agent-panel';
const INPUT_CLASS = 'jp-DataAgent-input';

/** What the server offers (`GET config`); null until it answered. */
export interface IServerStrategies {
  /** Every strategy the server knows, in the order to offer them. */
  catalog: StrategyInfo[];
  /** The ones it can run now. */
  available: string[];
}

/** A strategy's name in words, from the server's catalog. */
function strategyLabel(
  strategies: IServerStrategies | null,
  name: string
): string {
  return strategies?.catalog.find(s => s.name === name)?.label ?? name;
}

/**
 * Take down a widget `LuminoHost` attached. When an ancestor unmounts (the
 * sidebar switching notebooks), React may take the host out of the document
 * before this runs, and Lumino's detach then throws "Widget is not
 * attached", which unmounted the whole panel: the detach messages are sent
 * by hand in that case, so the widget and its children still clean up.
 */
export function disposeHosted(widget: Widget): void {
  if (widget.isDisposed) {
    return;
  }
  if (widget.isAttached && !widget.node.isConnected && !widget.parent) {
    widget.processMessage(Widget.Msg.BeforeDetach);
    widget.node.remove();
    widget.processMessage(Widget.Msg.AfterDetach);
  }
  widget.dispose();
}

/** Hosts a Lumino widget (a rendermime renderer, an output area) in React. */
function LuminoHost(props: {
  make: () => Widget;
  deps: React.DependencyList;
  className?: string;
}) {
  const ref = React.useRef<HTMLDivElement>(null);
  React.useEffect(() => {
    const host = ref.current;
    if (!host) {
      return;
    }
    const widget = props.make();
    if (host.isConnected) {
      Widget.attach(widget, host);
    } else {
      host.appendChild(widget.node);
    }
    return () => disposeHosted(widget);
  }, props.deps);
  return <div ref={ref} className={props.className} />;
}

/**
 * Python code with a Copy button, and an Insert button where the code can
 * go into the notebook as a suggestion.
 */
function CodeBlock(props: {
  code: string;
  rendermime: IRenderMimeRegistry;
  onInsert?: () => void;
  insertTitle?: string;
}) {
  const { code, rendermime, onInsert } = props;
  const [copied, setCopied] = React.useState(false);
  React.useEffect(() => {
    if (!copied) {
      return;
    }
    const timer = window.setTimeout(() => setCopied(false), 1500);
    return () => window.clearTimeout(timer);
  }, [copied]);
  return (
    <div className="jp-DataAgent-codeWrap">
      <div className="jp-DataAgent-codeTools">
        <button
          type="button"
          className="jp-DataAgent-toolButton jp-DataAgent-copy"
          title="Copy the code to the clipboard"
          onClick={() => {
            Clipboard.copyToSystem(code);
            setCopied(true);
          }}
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
        {onInsert && (
          <button
            type="button"
            className="jp-DataAgent-toolButton jp-DataAgent-codeInsert"
            title={props.insertTitle ?? 'Insert into the notebook'}
            onClick={onInsert}
          >
            Insert
          </button>
        )}
      </div>
      <HighlightedCode code={code} rendermime={rendermime} />
    </div>
  );
}

/** Python code, highlighted through the markdown renderer's code fences. */
function HighlightedCode(props: {
  code: string;
  rendermime: IRenderMimeRegistry;
}) {
  const { code, rendermime } = props;
  return (
    <LuminoHost
      className="jp-DataAgent-code"
      deps={[code]}
      make={() => {
        const renderer = rendermime.createRenderer('text/markdown');
        const fence = code.includes('```') ? '~~~~' : '```';
        void renderer.renderModel(
          new MimeModel({
            data: { 'text/markdown': `${fence}python\n${code}\n${fence}` },
            trusted: false
          })
        );
        return renderer;
      }}
    />
  );
}

/**
 * The text the model is writing, re-rendered in place as it grows: Markdown
 * with its code fences highlighted (bare code is shown as Python). One
 * renderer for the whole stream, so the block does not flicker.
 */
function StreamingText(props: {
  text: string;
  rendermime: IRenderMimeRegistry;
}) {
  const { text, rendermime } = props;
  const renderer = React.useRef<IRenderMime.IRenderer | null>(null);
  React.useEffect(() => {
    const source = /```|~~~/.test(text) ? text : '```python\n' + text + '\n```';
    void renderer.current?.renderModel(
      new MimeModel({ data: { 'text/markdown': source }, trusted: false })
    );
  }, [text]);
  return (
    <LuminoHost
      className="jp-DataAgent-code jp-DataAgent-streaming"
      deps={[]}
      make={() => {
        renderer.current = rendermime.createRenderer('text/markdown');
        return renderer.current;
      }}
    />
  );
}

/**
 * Model-written Markdown (an explanation), rendered by JupyterLab's own
 * Markdown renderer as untrusted data: HTML is sanitized, no script runs.
 */
function MarkdownBlock(props: {
  source: string;
  rendermime: IRenderMimeRegistry;
  className: string;
}) {
  const { source, rendermime, className } = props;
  return (
    <LuminoHost
      className={className}
      deps={[source]}
      make={() => {
        const renderer = rendermime.createRenderer('text/markdown');
        void renderer.renderModel(
          new MimeModel({ data: { 'text/markdown': source }, trusted: false })
        );
        return renderer;
      }}
    />
  );
}

/** The executed output preview, rendered like a notebook output area. */
function OutputPreview(props: {
  candidate: Candidate;
  rendermime: IRenderMimeRegistry;
  confinement: Confinement | null;
}) {
  const { candidate, rendermime, confinement } = props;
  if (confinement && !confinement.execute) {
    // Whatever came with the candidate, it did not run: say why, show nothing else.
    return (
      <div className="jp-DataAgent-noOutput jp-mod-notExecuted">
        Not executed{confinement.message ? `: ${confinement.message}` : '.'}
      </div>
    );
  }
  const outputs = previewOutputs(candidate.result);
  if (!candidate.result) {
    return <div className="jp-DataAgent-noOutput">Not executed</div>;
  }
  if (!outputs.length) {
    return <div className="jp-DataAgent-noOutput">Ran without output</div>;
  }
  return <OutputsView outputs={outputs} rendermime={rendermime} />;
}

/** Outputs (nbformat v4) rendered like a notebook output area. */
function OutputsView(props: {
  outputs: readonly IStoredOutput[];
  rendermime: IRenderMimeRegistry;
}) {
  const { outputs, rendermime } = props;
  return (
    <LuminoHost
      className="jp-DataAgent-output"
      deps={[outputs]}
      make={() => {
        // Untrusted: HTML is sanitized, scripts do not run.
        const model = new OutputAreaModel({
          values: outputs as nbformat.IOutput[],
          trusted: false
        });
        const area: OutputArea = new SimplifiedOutputArea({
          model,
          rendermime
        });
        area.disposed.connect(() => model.dispose());
        return area;
      }}
    />
  );
}

function resultBadge(candidate: Candidate, executed: boolean): string {
  const result = candidate.result;
  if (!result || !executed) {
    return '';
  }
  const time = result.duration_s ? ` in ${result.duration_s.toFixed(2)} s` : '';
  switch (result.status) {
    case 'ok':
      return `ran${time}`;
    case 'error':
      return `error${result.ename ? `: ${result.ename}` : ''}`;
    case 'timeout':
      return 'timed out';
    case 'died':
      return `stopped${result.limit ? ` (${result.limit} limit)` : ''}`;
  }
  return '';
}

/** What the vote says about one candidate: a short text and its explanation. */
export interface IVoteSummary {
  text: string;
  title: string;
}

/**
 * The vote as words, e.g. "3 of 5 agree (classes 3 · 1 · 1)": `support` is
 * the size of the candidate's answer class, `classes` the sizes of all the
 * classes that voted (largest first, from the turn's stats). Null when
 * nothing voted; the class sizes only when there was more than one class.
 */
export function voteSummary(
  support: number,
  classes: readonly number[]
): IVoteSummary | null {
  const total = classes.reduce((sum, size) => sum + size, 0);
  if (!classes.length || total <= 0) {
    return null;
  }
  const split = classes.length > 1;
  const samples = total === 1 ? 'sample' : 'samples';
  return {
    text:
      `${support} of ${total} agree` +
      (split ? ` (classes ${classes.join(' · ')})` : ''),
    title:
      'Samples whose outputs were the same answer: ' +
      `${support} of the ${total} ${samples} that voted gave this one` +
      (split
        ? `; the answer classes, largest first, hold ${classes.join(', ')}.`
        : '.')
  };
}

function CandidateView(props: {
  candidate: Candidate;
  index: number;
  total: number;
  chosen: boolean;
  /** Sizes of the turn's answer classes that voted; empty: no vote. */
  classes: readonly number[];
  rendermime: IRenderMimeRegistry;
  confinement: Confinement | null;
  /** Place this candidate in the notebook; absent when it cannot be. */
  onInsert?: () => void;
}) {
  const { candidate, rendermime, confinement } = props;
  const executed = !confinement || confinement.execute;
  const steps = candidate.steps.filter(s => s.explanation);
  const facts: { text: string; title?: string }[] = [];
  if (props.chosen && props.total > 1) {
    facts.push({ text: 'chosen' });
  }
  if (candidate.score !== null) {
    facts.push({ text: `score ${candidate.score.toFixed(2)}` });
  }
  // A support above 1 means the candidate voted; the chosen one won the vote.
  const vote =
    props.chosen || candidate.support > 1
      ? voteSummary(candidate.support, props.classes)
      : null;
  if (vote) {
    facts.push(vote);
  } else if (candidate.support > 1) {
    facts.push({ text: `support ${candidate.support}` });
  }
  if (candidate.repaired) {
    facts.push({ text: 'repaired' });
  }
  const badge = resultBadge(candidate, executed);
  const resultStatus = executed ? (candidate.result?.status ?? 'none') : 'none';
  return (
    <div className="jp-DataAgent-candidate" data-index={props.index}>
      <div className="jp-DataAgent-candidateHead">
        <span className={`jp-DataAgent-status jp-mod-${resultStatus}`}>
          {badge || 'not run'}
        </span>
        {facts.length > 0 && (
          <span className="jp-DataAgent-facts">
            {facts.map((fact, i) => (
              <React.Fragment key={i}>
                {i > 0 && ' · '}
                {fact.title ? (
                  <span className="jp-DataAgent-vote" title={fact.title}>
                    {fact.text}
                  </span>
                ) : (
                  fact.text
                )}
              </React.Fragment>
            ))}
          </span>
        )}
      </div>
      {steps.length > 0 ? (
        <ol className="jp-DataAgent-steps">
          {steps.map(s => (
            <li key={s.number} value={s.number}>
              <MarkdownBlock
                source={s.explanation}
                rendermime={rendermime}
                className="jp-DataAgent-stepText"
              />
            </li>
          ))}
        </ol>
      ) : (
        candidate.explanation && (
          <MarkdownBlock
            source={candidate.explanation}
            rendermime={rendermime}
            className="jp-DataAgent-explanation"
          />
        )
      )}
      {typeof candidate.meta?.not_repaired === 'string' && (
        <p className="jp-DataAgent-note jp-DataAgent-notRepaired">
          {candidate.meta.not_repaired}
        </p>
      )}
      <CodeBlock
        code={candidate.code}
        rendermime={rendermime}
        onInsert={props.onInsert}
        insertTitle="Insert below the active cell as a suggestion"
      />
      <OutputPreview
        candidate={candidate}
        rendermime={rendermime}
        confinement={confinement}
      />
    </div>
  );
}

let confinementIds = 0;

/**
 * The verdict on one turn's kernel copies: a badge whose layer list shows on
 * hover and while it has focus (a tab stop, described by the list; a tap on
 * a touch screen focuses it too). Escape hides it.
 */
export function ConfinementBadge(props: { confinement: Confinement }) {
  const { confinement } = props;
  const [id] = React.useState(
    () => `jp-DataAgent-confinement-${++confinementIds}`
  );
  // Where the list goes: placed against the panel's body (not the scrolling
  // conversation, which would clip it), below the badge or above it.
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
    const below = b.bottom - a.bottom - 4;
    const above = a.top - b.top - 4;
    // Hover and focus styles already apply here, so the list has its height.
    const needed = details.scrollHeight + 2;
    const up = needed > below && above > below;
    const room = Math.max(80, Math.floor(up ? above : below));
    setPlace({
      left: r.left - b.left,
      width: r.width,
      maxHeight: room,
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
        aria-label={`Kernel copies: ${label}, ${summary}, policy ${confinement.policy}`}
        aria-describedby={id}
        data-status={confinement.status}
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
        {confinement.message && (
          <div className="jp-DataAgent-confinementMessage">
            {confinement.message}
          </div>
        )}
        {total > 0 && (
          <ul className="jp-DataAgent-layers">
            {confinement.layers.map(layer => (
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
                  <span className="jp-DataAgent-layerDetail">
                    {layer.detail}
                  </span>
                )}
              </li>
            ))}
          </ul>
        )}
      </div>
    </span>
  );
}

/** Seconds since the component mounted, ticking once a second while `running`. */
function useElapsed(running: boolean): number {
  const started = React.useRef(Date.now());
  const [now, setNow] = React.useState(() => Date.now());
  React.useEffect(() => {
    if (!running) {
      return;
    }
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, [running]);
  return (now - started.current) / 1000;
}

function Progress(props: {
  job: IJobView;
  rendermime: IRenderMimeRegistry;
  /** Offered while the kernel is busy: go on without its live state. */
  onAnswerNow?: () => void;
}) {
  const { job, rendermime, onAnswerNow } = props;
  const running = !isFinished(job);
  const elapsed = useElapsed(running);
  const search = job.search;
  return (
    <div className="jp-DataAgent-progress" aria-live="polite">
      {running && (
        <div className="jp-DataAgent-progressLine">
          <span className="jp-DataAgent-spinner" aria-hidden="true" />
          <span className="jp-DataAgent-progressMessage">{job.message}</span>
          <span
            className="jp-DataAgent-elapsed"
            title="Time since the turn started"
          >
            {formatElapsed(elapsed)}
          </span>
        </div>
      )}
      {running && job.streaming && job.streaming.text && (
        <div aria-label="The model is writing">
          <StreamingText text={job.streaming.text} rendermime={rendermime} />
        </div>
      )}
      {job.waitingForKernel && running && (
        <div className="jp-DataAgent-waiting">
          Waiting for the kernel to finish running…
          {onAnswerNow && (
            <button
              type="button"
              className="jp-DataAgent-link jp-DataAgent-answerNow"
              title="Do not wait for the running cell: the model reads the notebook text only (no DataFrame schemas, candidates not run)"
              onClick={onAnswerNow}
            >
              Answer from the notebook text now
            </button>
          )}
        </div>
      )}
      {search && (
        <div className="jp-DataAgent-search">
          {search.iterations !== undefined && (
            <span>iteration {search.iterations}</span>
          )}
          {search.nodes !== undefined && <span>{search.nodes} nodes</span>}
          {typeof search.best_value === 'number' && (
            <span>best value {search.best_value.toFixed(2)}</span>
          )}
          {search.answers && search.answers.length > 0 && (
            <ul className="jp-DataAgent-answers">
              {search.answers.map((a, i) => (
                <li key={i}>
                  <code>{a.answer}</code> — {a.votes} vote
                  {a.votes === 1 ? '' : 's'}
                </li>
              ))}
            </ul>
          )}
        </div>
      )}
      {job.progress.length > 0 && (
        <details className="jp-DataAgent-log">
          <summary>
            {job.progress.length} step{job.progress.length === 1 ? '' : 's'}
          </summary>
          <ol>
            {job.progress.map(line => (
              <li key={line.seq} className={`jp-mod-${line.type}`}>
                {line.message}
              </li>
            ))}
          </ol>
        </details>
      )}
    </div>
  );
}

function StatusChip(props: { status: string }) {
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

/** What a turn (or the session) cost: tokens, model calls, time, estimated cost. */
function UsageLine(props: {
  usage: IUsage;
  price: ModelPrice | null;
  className: string;
  label?: string;
  time?: boolean;
  /** The turn's context report: shown as a gauge, its cuts on hover. */
  context?: ContextReport | null;
}) {
  const { usage, price, context } = props;
  return (
    <div className={props.className} title={usageTitle(usage, price)}>
      {props.label && (
        <span className="jp-DataAgent-usageLabel">{props.label} </span>
      )}
      {usageParts(usage, price, { time: props.time }).join(' · ')}
      {context && <ContextGauge report={context} />}
    </div>
  );
}

/** Prompt tokens against the budget; what was cut in a tooltip shown on hover and focus. */
function ContextGauge(props: { report: ContextReport }) {
  const { report } = props;
  const cut = contextWasCut(report);
  const tipId = React.useMemo(
    () => `jp-DataAgent-gaugeTip-${Math.random().toString(36).slice(2)}`,
    []
  );
  return (
    <>
      <span
        className={'jp-DataAgent-gauge' + (cut ? ' jp-mod-cut' : '')}
        role="meter"
        tabIndex={0}
        aria-label="Context used"
        aria-valuemin={0}
        aria-valuemax={report.window}
        aria-valuenow={Math.min(report.prompt_tokens, report.window)}
        aria-describedby={tipId}
      >
        <span className="jp-DataAgent-gaugeBar">
          <span
            className="jp-DataAgent-gaugeFill"
            style={{ width: `${Math.round(contextFill(report) * 100)}%` }}
          />
        </span>
        {contextLabel(report)}
        {cut && <span className="jp-DataAgent-gaugeCut"> · cut</span>}
      </span>
      <div id={tipId} role="tooltip" className="jp-DataAgent-gaugeTip">
        {contextTitle(report)
          .split('\n')
          .map((line, i) => (
            <div key={i}>{line}</div>
          ))}
      </div>
    </>
  );
}

function ExchangeView(props: {
  session: NotebookSession;
  exchange: IExchange;
  turn: ITurn | null;
  rendermime: IRenderMimeRegistry;
  strategies: IServerStrategies | null;
  price: ModelPrice | null;
}) {
  const { session, exchange, turn, rendermime, strategies, price } = props;
  const job = exchange.job;
  const candidates = job.candidates;
  const suggestion = exchange.turnId
    ? session.suggestions.suggestion(exchange.turnId)
    : null;
  // The panel shows what the notebook shows once the candidate is placed.
  const shown =
    suggestion &&
    (suggestion.status === 'suggested' || suggestion.status === 'accepted')
      ? suggestion.index
      : exchange.selected;
  const selected = Math.min(shown, Math.max(0, candidates.length - 1));
  const placed = suggestion?.status === 'suggested';
  const status = placed ? 'suggested' : turn?.status;
  // An explanation runs no code: no verdict on kernel copies to show.
  const confinement =
    exchange.strategy === EXPLAIN
      ? null
      : (job.confinement ?? turn?.confinement ?? null);
  return (
    <div className="jp-DataAgent-exchange" data-turn-id={exchange.turnId ?? ''}>
      <div className="jp-DataAgent-intent">
        <span className="jp-DataAgent-intentText">{exchange.intent}</span>
        <span className="jp-DataAgent-chip">
          {strategyLabel(strategies, exchange.strategy)}
        </span>
        {exchange.editCellId && session.cellIndex(exchange.editCellId) >= 0 && (
          <span
            className="jp-DataAgent-chip jp-DataAgent-editsCell"
            title="The suggestion replaces this cell, shown as a diff over it"
          >
            edits cell {session.cellIndex(exchange.editCellId) + 1}
          </span>
        )}
        {confinement && <ConfinementBadge confinement={confinement} />}
      </div>
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
      {job.result?.answer &&
        (job.result.strategy === EXPLAIN ? (
          // Prose about the cell: read here, nothing goes into the notebook.
          <MarkdownBlock
            source={job.result.answer}
            rendermime={rendermime}
            className="jp-DataAgent-prose"
          />
        ) : (
          <div className="jp-DataAgent-answer">
            Answer: <strong>{job.result.answer}</strong>
          </div>
        ))}
      {isFinished(job) &&
        job.status === 'done' &&
        !candidates.length &&
        !job.result?.answer && (
          <div className="jp-DataAgent-note">No candidate came back.</div>
        )}
      {candidates.length > 0 && (
        <div className="jp-DataAgent-candidates">
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
            {placed && (
              <>
                <button
                  className="jp-Button jp-mod-styled jp-mod-small jp-mod-accept jp-DataAgent-panelAccept"
                  onClick={() => session.suggestions.accept(exchange.turnId)}
                >
                  Accept
                </button>
                <button
                  className="jp-Button jp-mod-styled jp-mod-small jp-mod-reject jp-DataAgent-panelReject"
                  onClick={() => session.suggestions.reject(exchange.turnId)}
                >
                  Reject
                </button>
              </>
            )}
          </div>
          <CandidateView
            candidate={candidates[selected]}
            index={selected}
            total={candidates.length}
            chosen={job.chosen === selected}
            classes={job.result?.stats.classes ?? []}
            rendermime={rendermime}
            confinement={confinement}
            onInsert={
              isFinished(job) &&
              exchange.turnId &&
              !placed &&
              status !== 'accepted' &&
              status !== 'edited'
                ? () => session.insert(exchange, selected)
                : undefined
            }
          />
        </div>
      )}
      {job.result && (
        <UsageLine
          className="jp-DataAgent-usage"
          usage={usageOf(job.result.stats)}
          price={price}
          context={job.result.stats.context ?? null}
        />
      )}
      {isFinished(job) && (
        <TurnActions
          session={session}
          intent={exchange.intent}
          strategy={exchange.strategy}
          cellId={exchange.anchorCellId}
          editCellId={exchange.editCellId}
          turnId={exchange.turnId}
        />
      )}
    </div>
  );
}

/** Under a finished turn: ask it again, and find its cells in the notebook. */
function TurnActions(props: {
  session: NotebookSession;
  intent: string;
  strategy: string;
  cellId: string | null;
  /** The cell an edit turn would replace: a retry edits it again. */
  editCellId: string | null;
  turnId: string | null;
}) {
  const { session, intent, strategy, cellId, editCellId, turnId } = props;
  const cells = turnId ? session.turnCellIds(turnId).length : 0;
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
        disabled={!!session.running}
        onClick={() => session.retry(intent, strategy, cellId, editCellId)}
      >
        Retry
      </button>
    </div>
  );
}

/** A turn read back from the notebook (no live job): intent, decision, code. */
function StoredTurnView(props: {
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
        intent={turn.intent}
        strategy={turn.strategy ?? session.strategy}
        cellId={null}
        editCellId={turn.edits_cell ?? null}
        turnId={turn.turn_id}
      />
    </div>
  );
}

function Composer(props: {
  session: NotebookSession;
  settings: IAgentSettings;
  /** Strategies the server offers; null while unknown (the current one is offered). */
  strategies: IServerStrategies | null;
  /** The server's models, the configured one first; a picker when more than one. */
  models: string[];
}) {
  const { session, settings, strategies, models } = props;
  const [model, setModel] = React.useState<string | null>(session.model);
  React.useEffect(() => setModel(session.model), [session]);
  const [text, setText] = React.useState('');
  const [cursor, setCursor] = React.useState<number | null>(null);
  const [samples, setSamples] = React.useState<number | null>(settings.samples);
  const [budget, setBudget] = React.useState<number | null>(settings.budget);
  const [strategy, setStrategy] = React.useState<Strategy>(session.strategy);
  const draft = React.useRef('');
  const input = React.useRef<HTMLTextAreaElement>(null);
  const mentions = useMentions({
    text,
    setText,
    kernelId: () => session.panel.sessionContext.session?.kernel?.id ?? null,
    input
  });
  React.useEffect(() => setStrategy(session.strategy), [session]);
  React.useEffect(() => setSamples(settings.samples), [settings.samples]);
  React.useEffect(() => setBudget(settings.budget), [settings.budget]);
  const running = session.running;
  const pinned = session.pinnedCellId;
  const pinnedIndex = session.cellIndex(pinned);
  const problem = intentProblem(text);

  const send = () => {
    if (!text.trim() || running || problem) {
      return;
    }
    void session.send({ intent: text, strategy, samples, budget });
    setText('');
    setCursor(null);
  };

  const onKeyDown = (event: React.KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.nativeEvent.isComposing || mentions.onKeyDown(event)) {
      return;
    }
    const area = event.currentTarget;
    const history = session.intentHistory;
    if (event.key === 'Escape' && running) {
      event.preventDefault();
      event.stopPropagation();
      void session.stop();
    } else if (event.key === 'Enter' && !event.shiftKey) {
      event.preventDefault();
      send();
    } else if (
      event.key === 'ArrowUp' &&
      history.length &&
      area.selectionStart === 0 &&
      area.selectionEnd === 0
    ) {
      event.preventDefault();
      if (cursor === null) {
        draft.current = text;
      }
      const next =
        cursor === null ? history.length - 1 : Math.max(0, cursor - 1);
      setCursor(next);
      setText(history[next]);
    } else if (
      event.key === 'ArrowDown' &&
      cursor !== null &&
      area.selectionStart === area.value.length
    ) {
      event.preventDefault();
      const next = cursor + 1;
      if (next >= history.length) {
        setCursor(null);
        setText(draft.current);
      } else {
        setCursor(next);
        setText(history[next]);
      }
    }
  };

  return (
    <div className="jp-DataAgent-composer">
      {pinned && pinnedIndex >= 0 && (
        <div className="jp-DataAgent-pinned">
          About cell {pinnedIndex + 1}
          <button
            className="jp-DataAgent-unpin"
            aria-label="Ask about the active cell instead"
            onClick={() => (session.pinnedCellId = null)}
          >
            ×
          </button>
        </div>
      )}
      {mentions.popup}
      <textarea
        ref={input}
        className={INPUT_CLASS}
        rows={3}
        value={text}
        placeholder="Ask about this notebook… (Enter sends, Shift+Enter new line, ↑ history, @ names a DataFrame)"
        aria-label="Question for the Data Agent"
        {...mentions.inputProps}
        onSelect={event => mentions.onCaret(event.currentTarget)}
        onChange={event => {
          setText(event.target.value);
          setCursor(null);
          mentions.onCaret(event.target);
        }}
        onKeyDown={onKeyDown}
        aria-invalid={problem ? true : undefined}
      />
      {problem && (
        <div className="jp-DataAgent-intentProblem" role="alert">
          {problem}
        </div>
      )}
      <div className="jp-DataAgent-controls">
        <HTMLSelect
          className="jp-DataAgent-strategy"
          aria-label="Strategy"
          value={strategy}
          onChange={event => {
            const value = event.currentTarget.value as Strategy;
            setStrategy(value);
            session.strategy = value;
          }}
          options={chooserOptions(strategies, strategy)}
        />
        {models.length > 1 && (
          <HTMLSelect
            className="jp-DataAgent-model"
            aria-label="Model"
            title="The model that answers this notebook's questions"
            value={model ?? models[0]}
            onChange={event => {
              const value = event.currentTarget.value;
              const picked = value === models[0] ? null : value;
              setModel(picked);
              session.model = picked;
            }}
            options={models}
          />
        )}
        {knobDefault(strategies, strategy, 'samples') !== null && (
          <KnobInput
            name="samples"
            title="Candidates sampled (and, for Vote, executed and voted)"
            max={20}
            value={samples ?? knobDefault(strategies, strategy, 'samples')}
            onChange={setSamples}
          />
        )}
        {knobDefault(strategies, strategy, 'budget') !== null && (
          <KnobInput
            name="budget"
            title="Search iterations (Search) or steps (Agent)"
            max={200}
            value={budget ?? knobDefault(strategies, strategy, 'budget')}
            onChange={setBudget}
          />
        )}
        <span className="jp-DataAgent-spacer" />
        {running ? (
          <button
            className="jp-Button jp-mod-styled jp-mod-warn jp-DataAgent-stop"
            onClick={() => void session.stop()}
          >
            Stop
          </button>
        ) : (
          <button
            className="jp-Button jp-mod-styled jp-mod-accept jp-DataAgent-send"
            disabled={!text.trim() || !!problem}
            onClick={send}
          >
            Ask
          </button>
        )}
      </div>
    </div>
  );
}

/**
 * The chooser's entries: every strategy of the server's catalog except
 * Explain (a command on a cell, not a way to write code), with its label.
 */
/** The server's default for a strategy's knob; null when it has no such knob. */
function knobDefault(
  strategies: IServerStrategies | null,
  name: string,
  knob: 'samples' | 'budget'
): number | null {
  return strategies?.catalog.find(s => s.name === name)?.[knob] ?? null;
}

function KnobInput(props: {
  name: string;
  title: string;
  max: number;
  value: number | null;
  onChange: (value: number) => void;
}) {
  return (
    <label className="jp-DataAgent-number" title={props.title}>
      {props.name}
      <input
        type="number"
        min={1}
        max={props.max}
        value={props.value ?? ''}
        onChange={event =>
          props.onChange(Math.max(1, Number(event.target.value) || 1))
        }
      />
    </label>
  );
}

function chooserOptions(
  strategies: IServerStrategies | null,
  current: Strategy
) {
  if (!strategies) {
    return [{ value: current, label: current }];
  }
  return strategies.catalog
    .filter(s => s.name !== EXPLAIN)
    .map(s => {
      const missing = !strategies.available.includes(s.name);
      return {
        value: s.name,
        label: missing ? `${s.label} (not on this server)` : s.label,
        title: s.summary,
        disabled: missing
      };
    });
}

function Conversation(props: {
  session: NotebookSession;
  rendermime: IRenderMimeRegistry;
  strategies: IServerStrategies | null;
  price: ModelPrice | null;
}) {
  const { session, rendermime, strategies, price } = props;
  const items = session.timeline();
  const end = React.useRef<HTMLDivElement>(null);
  const last = items[items.length - 1];
  const lastKey = `${items.length}:${last?.exchange?.job.lastSeq ?? ''}:${last?.exchange?.job.status ?? ''}`;
  React.useEffect(() => {
    end.current?.scrollIntoView?.({ block: 'end' });
  }, [lastKey]);
  if (!items.length) {
    return (
      <div className="jp-DataAgent-empty">
        Ask a question about this notebook. The agent reads its cells, outputs
        and DataFrames, runs candidate code in a copy of the kernel, and offers
        the result as a suggested cell.
      </div>
    );
  }
  return (
    <div className="jp-DataAgent-conversation">
      {items.map(({ turn, exchange }) =>
        exchange ? (
          <ExchangeView
            key={exchange.key}
            session={session}
            exchange={exchange}
            turn={turn}
            rendermime={rendermime}
            strategies={strategies}
            price={price}
          />
        ) : (
          turn && (
            <StoredTurnView
              key={turn.turn_id}
              turn={turn}
              session={session}
              rendermime={rendermime}
              strategies={strategies}
            />
          )
        )
      )}
      <div ref={end} />
    </div>
  );
}

/** Ask first, then forget the notebook's conversation (accepted cells stay). */
async function confirmClear(session: NotebookSession): Promise<void> {
  const result = await showDialog({
    title: 'Clear the conversation?',
    body:
      `The Data Agent's turns stored in ${PathExt.basename(session.panel.context.localPath)} ` +
      'are removed, and pending suggestions are rejected. Accepted cells stay in the notebook.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Clear' })]
  });
  if (result.button.accept) {
    session.clearConversation();
  }
}

/** The sidebar widget; `session` follows the current notebook. */
export class AgentSidebar extends ReactWidget {
  constructor(
    private _rendermime: IRenderMimeRegistry,
    private _settings: () => IAgentSettings
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-DataAgent-panel');
  }

  get session(): NotebookSession | null {
    return this._session;
  }

  set session(session: NotebookSession | null) {
    if (session === this._session) {
      return;
    }
    this._session?.changed.disconnect(this._onChanged, this);
    this._session = session;
    session?.changed.connect(this._onChanged, this);
    this.update();
  }

  /** Put the keyboard in the question box. */
  focusInput(): void {
    const input = this.node.querySelector<HTMLTextAreaElement>(
      `.${INPUT_CLASS}`
    );
    input?.focus();
  }

  /** What the server offers and can run (from GET config). */
  get strategies(): IServerStrategies | null {
    return this._strategies;
  }

  set strategies(value: IServerStrategies | null) {
    this._strategies = value;
    this.update();
  }

  /** The models a turn may name (GET config); the picker shows when more than one. */
  get models(): string[] {
    return this._models;
  }

  set models(value: string[]) {
    this._models = value;
    this.update();
  }

  /** The configured model's price (GET config); null: no cost is shown. */
  get price(): ModelPrice | null {
    return this._price;
  }

  set price(value: ModelPrice | null) {
    this._price = value;
    this.update();
  }

  /** Re-render after a settings change. */
  refresh(): void {
    this.update();
  }

  protected render(): JSX.Element {
    const session = this._session;
    if (!session || session.isDisposed) {
      return (
        <div className="jp-DataAgent-empty">
          Open a notebook to ask the Data Agent about it.
        </div>
      );
    }
    const total = totalUsage(session.exchanges.map(e => e.job.result));
    return (
      <div className="jp-DataAgent-body">
        <div className="jp-DataAgent-header" title={session.panel.context.path}>
          <span className="jp-DataAgent-title">Data Agent</span>
          <span className="jp-DataAgent-notebook">
            {PathExt.basename(session.panel.context.localPath)}
          </span>
          <span className="jp-DataAgent-spacer" />
          {session.timeline().length > 0 && (
            <button
              type="button"
              className="jp-DataAgent-link jp-DataAgent-clear"
              title="Clear this notebook's conversation"
              disabled={!!session.running}
              onClick={() => void confirmClear(session)}
            >
              Clear
            </button>
          )}
        </div>
        {total && (
          <UsageLine
            className="jp-DataAgent-total"
            label={`Session, ${total.turns} turn${total.turns === 1 ? '' : 's'}:`}
            usage={total}
            price={this._price}
            time={false}
          />
        )}
        <Conversation
          session={session}
          rendermime={this._rendermime}
          strategies={this._strategies}
          price={this._price}
        />
        <Composer
          key={session.panel.id}
          session={session}
          settings={this._settings()}
          strategies={this._strategies}
          models={this._models}
        />
      </div>
    );
  }

  private _onChanged(): void {
    this.update();
  }

  private _session: NotebookSession | null = null;
  private _strategies: IServerStrategies | null = null;
  private _price: ModelPrice | null = null;
  private _models: string[] = [];
}
