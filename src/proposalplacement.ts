/**
 * Outside agents' proposals in one notebook: polled (proposalpoller.ts),
 * each pending one placed once as a suggestion (below its cell, or over
 * the cell it edits), and those that cannot be placed noted with why.
 */
import { NotebookPanel } from '@jupyterlab/notebook';
import { IDisposable } from '@lumino/disposable';

import { SuggestionController } from './notebook';
import { ProposalPoller } from './proposalpoller';
import {
  AgentActivity,
  IPollState,
  Proposal,
  isLeader,
  planProposals,
  proposalCandidate,
  turnOfProposal
} from './proposals';

export class ProposalPlacement implements IDisposable {
  constructor(
    private _panel: NotebookPanel,
    private _suggestions: SuggestionController,
    /** After a poll that changed what the panel shows. */
    private _onChange: () => void
  ) {
    this._poller = new ProposalPoller({
      path: () => this._panel.context.localPath,
      onPoll: (state, changed) => this._onPoll(state, changed)
    });
    this._poller.start();
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** The notebook's proposals as the server has them now. */
  get proposals(): readonly Proposal[] {
    return this._poller.state.proposals;
  }

  /** What each outside agent did on this notebook (the server's counts). */
  get activity(): readonly AgentActivity[] {
    return this._poller.state.activity;
  }

  /** Why a pending proposal is not shown in the notebook; null: it is (or can be). */
  blocked(proposalId: string): string | null {
    return this._blocked.get(proposalId) ?? null;
  }

  /** Forget what was seen (the notebook was renamed) and ask again. */
  reset(): void {
    this._poller.reset();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._poller.dispose();
  }

  /**
   * After each answer of the proposals poll: place the pending proposals
   * not in the notebook yet (once: their tag or stored turn says they are),
   * and note those that cannot be placed.
   */
  private _onPoll(state: IPollState, changed: boolean): void {
    const model = this._panel.model;
    if (this._disposed || !model) {
      return;
    }
    const now = Date.now();
    for (const p of state.proposals) {
      if (!this._firstSeen.has(p.id)) {
        this._firstSeen.set(p.id, now);
      }
    }
    const cells = model.sharedModel.cells;
    const awareness = (
      model.sharedModel as unknown as {
        awareness?: { clientID: number; getStates(): Map<number, unknown> };
      }
    ).awareness;
    const plan = planProposals(state.proposals, {
      hasTurn: id => !!this._suggestions.store.turn(id),
      hasTaggedCell: id => this._suggestions.hasTaggedCells(id),
      cellType: id => cells.find(c => c.getId() === id)?.cell_type ?? null,
      leader: isLeader(
        awareness?.clientID,
        awareness?.getStates().keys() ?? []
      ),
      firstSeen: this._firstSeen,
      now
    });
    for (const proposal of plan.place) {
      this._place(proposal);
    }
    const blockedBefore = [...this._blocked.entries()].join('|');
    this._blocked = plan.blocked;
    if (
      changed ||
      plan.place.length ||
      blockedBefore !== [...plan.blocked.entries()].join('|')
    ) {
      this._onChange();
    }
  }

  /** A proposal as a suggestion: below its cell (else last), or over the cell it edits. */
  private _place(proposal: Proposal): void {
    const cells = this._panel.model?.sharedModel.cells ?? [];
    const after =
      proposal.after_cell_id &&
      cells.some(c => c.getId() === proposal.after_cell_id)
        ? proposal.after_cell_id
        : (cells[cells.length - 1]?.getId() ?? null);
    const turn = turnOfProposal(proposal);
    this._suggestions.recordTurn(turn);
    this._suggestions.insert({
      turnId: turn.turn_id,
      intent: turn.intent,
      candidates: [proposalCandidate(proposal)],
      index: 0,
      mode: 'single',
      anchorCellId: after,
      replaceCellId: proposal.kind === 'edit' ? proposal.cell_id : null
    });
  }

  private _poller: ProposalPoller;
  private _firstSeen = new Map<string, number>();
  private _blocked = new Map<string, string>();
  private _disposed = false;
}
