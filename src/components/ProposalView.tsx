/**
 * An outside agent's proposal in the conversation: who proposed it, a new
 * cell or an edit of one, its explanation, code and the output it gave in a
 * kernel copy, where it stands, and Accept / Accept & Run / Reject while it
 * is shown in the notebook. A proposal that cannot be shown there (the cell
 * it edits is gone) says so.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import * as React from 'react';

import type { ITurn } from '../metadata';
import {
  AgentActivity,
  Proposal,
  activityLine,
  proposalAsCandidate,
  proposalTurnId
} from '../proposals';
import type { NotebookSession } from '../session';
import { CodeBlock, MarkdownBlock, OutputsView } from './blocks';
import { CandidateView } from './CandidateView';
import { StatusChip } from './common';

/** One line per outside agent that worked on this notebook. */
export function AgentActivityLines(props: {
  activity: readonly AgentActivity[];
}) {
  if (!props.activity.length) {
    return null;
  }
  return (
    <ul
      className="jp-DataAgent-agents"
      aria-label="Outside agents on this notebook"
    >
      {props.activity.map(a => (
        <li
          key={a.agent}
          className="jp-DataAgent-agentActivity"
          title="Code this agent ran in copies of your kernel, and the cells or edits it proposed"
        >
          {activityLine(a)}
        </li>
      ))}
    </ul>
  );
}

/** What a proposal stored in the notebook shows when the server forgot it. */
function StoredProposal(props: {
  turn: ITurn;
  rendermime: IRenderMimeRegistry;
}) {
  const { turn, rendermime } = props;
  const code = turn.candidates[0] ?? turn.code;
  const explanation = turn.explanations?.[0];
  const preview = turn.previews?.[0];
  return (
    <div className="jp-DataAgent-candidate">
      {explanation && (
        <MarkdownBlock
          source={explanation}
          rendermime={rendermime}
          className="jp-DataAgent-explanation"
        />
      )}
      <CodeBlock code={code} rendermime={rendermime} />
      {preview &&
        (preview.length ? (
          <OutputsView outputs={preview} rendermime={rendermime} />
        ) : (
          <div className="jp-DataAgent-noOutput">Ran without output</div>
        ))}
    </div>
  );
}

export function ProposalView(props: {
  session: NotebookSession;
  /** The turn it is stored as; null: not placed in the notebook. */
  turn: ITurn | null;
  /** As the server has it now; null: the server no longer has it. */
  proposal: Proposal | null;
  rendermime: IRenderMimeRegistry;
}) {
  const { session, turn, proposal, rendermime } = props;
  const turnId =
    turn?.turn_id ?? (proposal ? proposalTurnId(proposal.id) : null);
  if (!turnId) {
    return null;
  }
  const agent = proposal?.agent ?? turn?.agent ?? 'An agent';
  const suggestion = session.suggestions.suggestion(turnId);
  const placed = suggestion?.status === 'suggested';
  const blocked =
    proposal && !turn ? session.proposalBlocked(proposal.id) : null;
  const status = placed
    ? 'suggested'
    : (turn?.status ?? (blocked ? 'pending' : (proposal?.status ?? 'pending')));
  const editsCell = proposal?.cell_id ?? turn?.edits_cell ?? null;
  const edit = proposal ? proposal.kind === 'edit' : !!turn?.edits_cell;
  const editIndex = edit ? session.cellIndex(editsCell) : -1;
  const cells = turn ? session.turnCellIds(turnId).length : 0;
  return (
    <div
      className="jp-DataAgent-exchange jp-DataAgent-proposal"
      data-turn-id={turnId}
      data-proposal-id={proposal?.id ?? turn?.proposal_id ?? ''}
    >
      <div className="jp-DataAgent-intent">
        <span className="jp-DataAgent-agentName">{agent}</span>
        <span className="jp-DataAgent-intentText">
          {edit ? 'proposes an edit' : 'proposes a cell'}
        </span>
        {edit && editIndex >= 0 && (
          <span
            className="jp-DataAgent-chip jp-DataAgent-editsCell"
            title="The proposal replaces this cell, shown as a diff over it"
          >
            edits cell {editIndex + 1}
          </span>
        )}
      </div>
      {blocked && (
        <div className="jp-DataAgent-error jp-DataAgent-blocked">{blocked}</div>
      )}
      {proposal?.note && (
        <div className="jp-DataAgent-note jp-DataAgent-proposalNote">
          {proposal.note}
        </div>
      )}
      <div className="jp-DataAgent-candidateBar">
        <span className="jp-DataAgent-spacer" />
        <StatusChip status={status} />
        {placed && (
          <>
            <button
              type="button"
              className="jp-Button jp-mod-styled jp-mod-small jp-mod-accept jp-DataAgent-panelAccept"
              aria-label={`Accept ${agent}'s proposal`}
              onClick={() => session.suggestions.accept(turnId)}
            >
              Accept
            </button>
            <button
              type="button"
              className="jp-Button jp-mod-styled jp-mod-small jp-mod-accept jp-DataAgent-panelAcceptRun"
              aria-label={`Accept ${agent}'s proposal and run it`}
              onClick={() => void session.suggestions.acceptAndRun(turnId)}
            >
              Accept & Run
            </button>
            <button
              type="button"
              className="jp-Button jp-mod-styled jp-mod-small jp-mod-reject jp-DataAgent-panelReject"
              aria-label={`Reject ${agent}'s proposal`}
              onClick={() => session.suggestions.reject(turnId)}
            >
              Reject
            </button>
          </>
        )}
      </div>
      {proposal ? (
        <CandidateView
          candidate={proposalAsCandidate(proposal)}
          index={0}
          total={1}
          chosen={false}
          classes={[]}
          rendermime={rendermime}
          confinement={null}
        />
      ) : (
        turn && <StoredProposal turn={turn} rendermime={rendermime} />
      )}
      {cells > 0 && (
        <div className="jp-DataAgent-turnActions">
          <button
            type="button"
            className="jp-DataAgent-link jp-DataAgent-showCells"
            title="Scroll the notebook to this proposal's cell and select it"
            onClick={() => session.showInNotebook(turnId)}
          >
            Show in notebook
          </button>
        </div>
      )}
    </div>
  );
}
