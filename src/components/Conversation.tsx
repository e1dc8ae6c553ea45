/**
 * The conversation of the current notebook: its stored turns and live
 * requests, in order, scrolled to the newest.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import * as React from 'react';

import type { IExchange } from '../exchange';
import type { ITurn } from '../metadata';
import type { NotebookSession } from '../session';
import type { IPrices } from '../usage';
import { IServerStrategies } from './common';
import { ExchangeView } from './ExchangeView';
import { OutsideTurnView } from './OutsideTurnView';
import { ProposalView } from './ProposalView';
import { StoredTurnView } from './StoredTurnView';

export function Conversation(props: {
  session: NotebookSession;
  rendermime: IRenderMimeRegistry;
  strategies: IServerStrategies | null;
  prices: IPrices;
}) {
  const { session, rendermime, strategies, prices } = props;
  const items = session.timeline();
  const busy = !!session.running;
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
  // Values only (no stored turn object, read afresh each time): the
  // memoized view re-renders when one of them changed.
  const exchangeView = (exchange: IExchange, turn: ITurn | null) => (
    <ExchangeView
      key={exchange.key}
      session={session}
      exchange={exchange}
      rendermime={rendermime}
      strategies={strategies}
      prices={prices}
      suggestion={
        exchange.turnId ? session.suggestions.suggestion(exchange.turnId) : null
      }
      turnStatus={turn?.status ?? null}
      storedConfinement={
        exchange.job.confinement ? null : (turn?.confinement ?? null)
      }
      editCellIndex={session.cellIndex(exchange.editCellId)}
      turnCells={
        exchange.turnId ? session.turnCellIds(exchange.turnId).length : 0
      }
      busy={busy}
    />
  );
  return (
    <div className="jp-DataAgent-conversation">
      {items.map(({ turn, exchange, proposal, outside }) =>
        outside ? (
          // A turn started elsewhere (%%agent, MCP, ACP, another tab).
          <OutsideTurnView
            key={`outside-${outside.summary.job_id}`}
            session={session}
            outside={outside}
          >
            {exchange && exchangeView(exchange, turn)}
          </OutsideTurnView>
        ) : proposal || turn?.agent ? (
          // An outside agent's proposal (MCP, ACP).
          <ProposalView
            key={turn?.turn_id ?? `proposal-${proposal!.id}`}
            session={session}
            turn={turn}
            proposal={proposal}
            rendermime={rendermime}
          />
        ) : exchange ? (
          exchangeView(exchange, turn)
        ) : (
          turn && (
            <StoredTurnView
              key={turn.turn_id}
              turn={turn}
              session={session}
              rendermime={rendermime}
              strategies={strategies}
              prices={prices}
            />
          )
        )
      )}
      <div ref={end} />
    </div>
  );
}
