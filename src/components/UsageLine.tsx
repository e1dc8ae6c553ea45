/**
 * What a turn (or the session) cost, and how full its prompt was.
 */
import * as React from 'react';

import {
  contextFill,
  contextLabel,
  contextTitle,
  contextWasCut,
  IUsage,
  usageParts,
  usageTitle
} from '../usage';
import type { ContextReport, ModelPrice } from '../wire';

/** What a turn (or the session) cost: tokens, model calls, time, estimated cost. */
export function UsageLine(props: {
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
