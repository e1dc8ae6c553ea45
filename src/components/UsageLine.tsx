/**
 * What a turn (or the session) cost, and how full its prompt was.
 */
import * as React from 'react';

import {
  contextFill,
  contextLabel,
  contextTitle,
  contextWasCut,
  costOf,
  IPrices,
  ISessionUsage,
  IUsage,
  sessionTitle,
  turnPrice,
  usageParts,
  usageTitle
} from '../usage';
import type { ContextReport } from '../wire';

/** What one turn cost: tokens, model calls, time, and the cost at the price
 * of the model it ran on (none when that model has no price). */
export function UsageLine(props: {
  usage: IUsage;
  prices: IPrices;
  className: string;
  /** The turn's context report: shown as a gauge, its cuts on hover. */
  context?: ContextReport | null;
}) {
  const { usage, context } = props;
  const price = turnPrice(props.prices, usage);
  return (
    <div className={props.className} title={usageTitle(usage, price)}>
      {usageParts(usage, costOf(usage, price)).join(' · ')}
      {context && <ContextGauge report={context} />}
    </div>
  );
}

/** The session's turns added up: each priced turn's cost at its own model's price. */
export function SessionUsageLine(props: {
  session: ISessionUsage;
  className: string;
}) {
  const { usage, cost, priced } = props.session;
  return (
    <div className={props.className} title={sessionTitle(props.session)}>
      <span className="jp-DataAgent-usageLabel">
        Session, {usage.turns} turn{usage.turns === 1 ? '' : 's'}:{' '}
      </span>
      {usageParts(usage, cost, { time: false, priced }).join(' · ')}
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
