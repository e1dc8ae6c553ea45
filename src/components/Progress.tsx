/**
 * A running turn's progress: the current message and elapsed time, the
 * text the model is writing, the wait for a busy kernel, search progress,
 * and the log of steps.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import * as React from 'react';

import { formatElapsed, IJobView, isFinished } from '../events';
import { AnalysisPlan } from './AnalysisPlan';
import { plural } from '../usage';
import { StreamingText } from './blocks';

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

export function Progress(props: {
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
      {job.plan && <AnalysisPlan plan={job.plan} running={running} />}
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
          {search.nodes !== undefined && (
            <span>{plural(search.nodes, 'node')}</span>
          )}
          {typeof search.best_value === 'number' && (
            <span>best value {search.best_value.toFixed(2)}</span>
          )}
          {search.answers && search.answers.length > 0 && (
            <ul className="jp-DataAgent-answers">
              {search.answers.map((a, i) => (
                <li key={i}>
                  <code>{a.answer}</code> — {plural(a.votes, 'vote')}
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
