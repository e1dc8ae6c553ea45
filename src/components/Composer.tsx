/**
 * The question box under the conversation: the question (with history and
 * `@` mentions of the kernel's DataFrames), the strategy and model pickers,
 * the strategy's knobs within the server's limits, and Ask / Stop.
 */
import { HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { focusNotebookCell } from '../cellfocus';
import { useMentions } from '../mentions';
import {
  EXPLAIN,
  Limits,
  Strategy,
  clampKnob,
  intentProblem,
  maxIntentChars
} from '../models';
import type { IAgentSettings, NotebookSession } from '../session';
import { IServerStrategies } from './common';

/** The question box's class: the sidebar puts the keyboard there. */
export const INPUT_CLASS = 'jp-DataAgent-input';

export function Composer(props: {
  session: NotebookSession;
  /** The settings, within the server's limits. */
  settings: IAgentSettings;
  /** Strategies the server offers; null while unknown (the current one is offered). */
  strategies: IServerStrategies | null;
  /** The server's models, the configured one first; a picker when more than one. */
  models: string[];
  /** What the server accepts (`GET config`); null while unknown. */
  limits: Limits;
}) {
  const { session, settings, strategies, models, limits } = props;
  const [model, setModel] = React.useState<string | null>(session.model);
  React.useEffect(() => setModel(session.model), [session]);
  const [text, setText] = React.useState('');
  const [samples, setSamples] = React.useState<number | null>(settings.samples);
  const [budget, setBudget] = React.useState<number | null>(settings.budget);
  const [strategy, setStrategy] = React.useState<Strategy>(session.strategy);
  const history = useHistoryKeys(session, text, setText);
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
  const problem = intentProblem(text, maxIntentChars(limits));

  const send = () => {
    if (!text.trim() || running || problem) {
      return;
    }
    void session.send({ intent: text, strategy, samples, budget });
    setText('');
    history.reset();
  };

  const onKeyDown = (event: React.KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.nativeEvent.isComposing || mentions.onKeyDown(event)) {
      return;
    }
    if (event.key === 'Escape' && running) {
      event.preventDefault();
      event.stopPropagation();
      void session.stop();
    } else if (event.key === 'Escape') {
      // As a cell's editor: Escape goes to the notebook, in command mode,
      // where the suggestion's keys and the notebook's own act.
      event.preventDefault();
      event.stopPropagation();
      void focusNotebookCell(session.panel.content);
    } else if (event.key === 'Enter' && !event.shiftKey) {
      event.preventDefault();
      send();
    } else {
      history.onKey(event);
    }
  };

  return (
    <div className="jp-DataAgent-composer">
      {pinned && pinnedIndex >= 0 && (
        <PinnedCell session={session} index={pinnedIndex} />
      )}
      {mentions.popup}
      <textarea
        ref={input}
        className={INPUT_CLASS}
        rows={3}
        value={text}
        placeholder="Ask about this notebook… (Enter sends, Shift+Enter new line, ↑ history, @ names a DataFrame, Esc to the notebook)"
        aria-label="Question for the Data Agent"
        {...mentions.inputProps}
        onSelect={event => mentions.onCaret(event.currentTarget)}
        onChange={event => {
          setText(event.target.value);
          history.reset();
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
      <ComposerControls
        session={session}
        strategies={strategies}
        models={models}
        limits={limits}
        strategy={strategy}
        setStrategy={setStrategy}
        model={model}
        setModel={setModel}
        samples={samples}
        setSamples={setSamples}
        budget={budget}
        setBudget={setBudget}
        running={!!running}
        canSend={!!text.trim() && !problem}
        send={send}
      />
    </div>
  );
}

/** ↑/↓ through the notebook's past questions, keeping the draft being typed. */
function useHistoryKeys(
  session: NotebookSession,
  text: string,
  setText: (text: string) => void
) {
  const [cursor, setCursor] = React.useState<number | null>(null);
  const draft = React.useRef('');
  const onKey = (event: React.KeyboardEvent<HTMLTextAreaElement>) => {
    const area = event.currentTarget;
    const history = session.intentHistory;
    if (
      event.key === 'ArrowUp' &&
      history.length &&
      (cursor === null
        ? area.selectionStart === 0 && area.selectionEnd === 0
        : // Browsing: the caret sits at the end of the entry shown; one
          // press per step from anywhere on its first line.
          !area.value.slice(0, area.selectionStart).includes('\n'))
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
      !area.value.slice(area.selectionEnd).includes('\n')
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

  return { reset: () => setCursor(null), onKey };
}

/** The cell the question is pinned to, with a button to unpin it. */
function PinnedCell(props: { session: NotebookSession; index: number }) {
  return (
    <div className="jp-DataAgent-pinned">
      About cell {props.index + 1}
      <button
        className="jp-DataAgent-unpin"
        aria-label="Ask about the active cell instead"
        onClick={() => (props.session.pinnedCellId = null)}
      >
        ×
      </button>
    </div>
  );
}

/** The strategy and model pickers, the strategy's knobs, and Ask / Stop. */
function ComposerControls(props: {
  session: NotebookSession;
  strategies: IServerStrategies | null;
  models: string[];
  limits: Limits;
  strategy: Strategy;
  setStrategy: (strategy: Strategy) => void;
  model: string | null;
  setModel: (model: string | null) => void;
  samples: number | null;
  setSamples: (samples: number) => void;
  budget: number | null;
  setBudget: (budget: number) => void;
  running: boolean;
  canSend: boolean;
  send: () => void;
}) {
  const { session, strategies, models, limits, strategy, setStrategy } = props;
  const { model, setModel, samples, setSamples, budget, setBudget } = props;
  const { running, canSend, send } = props;
  // The pickers wrap among themselves; Ask / Stop keeps its place on the
  // first row at the right, whatever the panel's width.
  return (
    <div className="jp-DataAgent-controls">
      <div className="jp-DataAgent-pickers">
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
            max={limits?.max_samples}
            value={samples ?? knobDefault(strategies, strategy, 'samples')}
            onChange={setSamples}
          />
        )}
        {knobDefault(strategies, strategy, 'budget') !== null && (
          <KnobInput
            name="budget"
            title="Search iterations (Search) or steps (Agent)"
            max={limits?.max_budget}
            value={budget ?? knobDefault(strategies, strategy, 'budget')}
            onChange={setBudget}
          />
        )}
      </div>
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
          disabled={!canSend}
          onClick={send}
        >
          Ask
        </button>
      )}
    </div>
  );
}

/** The server's default for a strategy's knob; null when it has no such knob. */
function knobDefault(
  strategies: IServerStrategies | null,
  name: string,
  knob: 'samples' | 'budget'
): number | null {
  return strategies?.catalog.find(s => s.name === name)?.[knob] ?? null;
}

/** A knob of the strategy: at least 1, at most the server's limit (when known). */
function KnobInput(props: {
  name: string;
  title: string;
  max: number | undefined;
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
          props.onChange(
            clampKnob(Number(event.target.value) || 1, props.max) ?? 1
          )
        }
      />
    </label>
  );
}

/**
 * The chooser's entries: every strategy of the server's catalog except
 * Explain (a command on a cell, not a way to write code), with its label.
 */
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
