/**
 * An analysis's plan while it runs: its steps in order, each with its
 * status (to do, writing, running in a copy, repairing, done, failed), as
 * the server's progress events say. A list, announced politely to screen
 * readers as it changes.
 */
import * as React from 'react';

import {
  IPlanStep,
  PLAN_LABELS,
  planStatusAtEnd,
  planSummary
} from '../analysis';

export function AnalysisPlan(props: {
  plan: readonly IPlanStep[];
  /** False once the turn ended: a step still under way was stopped. */
  running: boolean;
}) {
  const { plan, running } = props;
  if (!plan.length) {
    return null;
  }
  return (
    <div className="jp-DataAgent-analysisPlan">
      <div className="jp-DataAgent-analysisPlanHead">
        Plan: {planSummary(plan)}
      </div>
      <ol aria-label="Analysis plan" aria-live="polite">
        {plan.map(step => {
          const status = running ? step.status : planStatusAtEnd(step.status);
          const label = PLAN_LABELS[status];
          return (
            <li
              key={step.number}
              className={`jp-DataAgent-planStep jp-mod-${status}`}
              data-step={step.number}
              data-status={status}
            >
              <span className="jp-DataAgent-planIcon" aria-hidden="true">
                {label.icon}
              </span>{' '}
              <span className="jp-DataAgent-planTitle">
                {step.title || `Step ${step.number}`}
              </span>{' '}
              <span className="jp-DataAgent-planStatus">({label.words})</span>
            </li>
          );
        })}
      </ol>
    </div>
  );
}
