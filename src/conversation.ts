/**
 * The conversation store of one notebook: its turns, kept in the notebook's
 * metadata (`jupyter_data_agent`, read by the Python side too), and the one
 * path a decision takes. A decision (accepted, accepted and run, edited,
 * rejected) is written to the turn in the notebook and posted to the
 * server's decisions store (which trains the value model) by `decide`, and
 * by nothing else; a decision on an outside agent's proposal is posted to
 * that proposal (`proposals/<id>/decision`) instead.
 */
import type { NotebookPanel } from '@jupyterlab/notebook';

import type { IStepDecision } from './analysis';
import { postDecision, postProposalDecision } from './handler';
import {
  INotebookAgentMetadata,
  ITurn,
  METADATA_KEY,
  METADATA_VERSION,
  TurnStatus,
  clearedAt,
  conversationValue,
  readConversation,
  updateTurn,
  upsertTurn
} from './metadata';
import { proposalIdOf } from './proposals';

/** How long an edit after Accept waits for typing to pause before it is sent. */
const PROPOSAL_EDIT_DELAY_MS = 1000;

/** What the user decided about a turn's suggestion. */
export interface IDecision {
  turnId: string;
  /** The question, for a turn not stored yet and for the server. */
  intent: string;
  status: TurnStatus;
  /** The code the turn ends with: its cells' code, or the candidate's. */
  code: string;
  /** The cells that hold it; absent or empty: those stored stay. */
  cellIds?: string[];
  /** Every candidate's code (a turn not stored yet keeps them). */
  candidates?: string[];
  /** The candidate decided on: its position and its code as it came. */
  candidateIndex?: number;
  candidateCode?: string;
  /** The cell an edit turn replaces. */
  editsCell?: string | null;
  /** Accepted in order to run it (Accept & Run). */
  run?: boolean;
  /** An analysis: one decision per step goes to the server, none for the turn. */
  steps?: IStepDecision[];
}

/** One per notebook panel: reads and writes its stored conversation. */
export class ConversationStore {
  constructor(private _panel: NotebookPanel) {}

  /** The stored conversation as it is now (an empty one when there is none). */
  get conversation(): INotebookAgentMetadata {
    return readConversation({
      [METADATA_KEY]: this._panel.model?.getMetadata(METADATA_KEY)
    });
  }

  /** When the conversation was last cleared (seconds; 0: never). */
  get cleared(): number {
    return clearedAt({
      [METADATA_KEY]: this._panel.model?.getMetadata(METADATA_KEY)
    });
  }

  /** Forget every stored turn, and that the server's turns started up to `at` were seen. */
  clear(at: number): void {
    const model = this._panel.model;
    model?.setMetadata(METADATA_KEY, {
      ...conversationValue(model.getMetadata(METADATA_KEY), {
        version: METADATA_VERSION,
        turns: []
      }),
      cleared: at
    });
  }

  turn(turnId: string): ITurn | undefined {
    return this.conversation.turns.find(t => t.turn_id === turnId);
  }

  /** Store (or replace) a turn. */
  recordTurn(turn: ITurn): void {
    this.write(upsertTurn(this.conversation, turn));
  }

  /** Change some fields of a stored turn (not its decision: see `decide`). */
  updateTurn(turnId: string, patch: Partial<Omit<ITurn, 'turn_id'>>): void {
    this.write(updateTurn(this.conversation, turnId, patch));
  }

  /**
   * Record a decision: the turn in the notebook gets its status, code and
   * cells, and a decision that changed (not back to pending) goes to the
   * server's store. Never in the user's way: a server without the
   * store, or offline, is ignored.
   */
  decide(decision: IDecision): void {
    const conversation = this.conversation;
    const existing = conversation.turns.find(
      t => t.turn_id === decision.turnId
    );
    const cellIds = decision.cellIds?.length
      ? decision.cellIds
      : (existing?.cell_ids ?? []);
    const edits = decision.editsCell ? { edits_cell: decision.editsCell } : {};
    // Posted once per change of decision; back from "edited" to
    // "accepted" (the user undid their edits) was already recorded.
    const again =
      existing?.status === 'edited' && decision.status === 'accepted';
    const proposalId = proposalIdOf(decision.turnId);
    if (proposalId) {
      // The agent asks for the final source: every change of it goes.
      if (
        existing?.status !== decision.status ||
        existing?.code !== decision.code
      ) {
        this._postProposal(proposalId, decision);
      }
    } else if (existing?.status !== decision.status && !again) {
      this._post(decision);
    }
    if (existing) {
      this.write(
        updateTurn(conversation, decision.turnId, {
          status: decision.status,
          code: decision.code,
          cell_ids: cellIds,
          ...edits
        })
      );
    } else {
      this.write(
        upsertTurn(conversation, {
          turn_id: decision.turnId,
          intent: decision.intent,
          code: decision.code,
          status: decision.status,
          cell_ids: cellIds,
          candidates: decision.candidates ?? [],
          created: Date.now() / 1000,
          ...edits
        })
      );
    }
  }

  /** Write the conversation, keeping the other keys stored with it. */
  write(conversation: INotebookAgentMetadata): void {
    const model = this._panel.model;
    if (!model) {
      return;
    }
    model.setMetadata(
      METADATA_KEY,
      conversationValue(model.getMetadata(METADATA_KEY), conversation)
    );
  }

  /**
   * An outside agent's proposal: its agent learns the decision there. Sent
   * once typing pauses (an edit after Accept changes the final source at
   * each keystroke); the last word is the one the server keeps.
   */
  private _postProposal(proposalId: string, decision: IDecision): void {
    if (decision.status === 'pending') {
      return;
    }
    window.clearTimeout(this._proposalTimers.get(proposalId));
    const send = () => {
      this._proposalTimers.delete(proposalId);
      postProposalDecision(proposalId, {
        version: 1,
        decision: decision.status as 'accepted' | 'rejected' | 'edited',
        final_source: decision.status === 'rejected' ? '' : decision.code
      }).catch(error =>
        console.warn('jupyter-data-agent: proposal decision not sent', error)
      );
    };
    if (decision.status === 'edited') {
      this._proposalTimers.set(
        proposalId,
        window.setTimeout(send, PROPOSAL_EDIT_DELAY_MS)
      );
    } else {
      send();
    }
  }

  private _proposalTimers = new Map<string, number>();

  private _post(decision: IDecision): void {
    if (decision.status === 'pending') {
      return;
    }
    if (decision.steps) {
      for (const step of decision.steps) {
        postDecision({
          version: 1,
          turn_id: decision.turnId,
          candidate: decision.candidateIndex ?? 0,
          decision: step.decision,
          intent: decision.intent,
          code: step.code,
          final_code: step.finalCode,
          notebook_path: this._panel.context.path,
          step: step.step
        }).catch(error =>
          console.debug('jupyter-data-agent: decision not recorded', error)
        );
      }
      return;
    }
    postDecision({
      version: 1,
      turn_id: decision.turnId,
      candidate: decision.candidateIndex ?? 0,
      decision:
        decision.status === 'accepted' && decision.run
          ? 'accepted_run'
          : decision.status,
      intent: decision.intent,
      code: decision.candidateCode ?? '',
      final_code: decision.code,
      notebook_path: this._panel.context.path
    }).catch(error =>
      console.debug('jupyter-data-agent: decision not recorded', error)
    );
  }
}
