/// <reference types="node" />
/**
 * tests/data/turns.golden.ipynb holds turns exactly as the front end stores
 * them; the Python reader's tests read the same file (tests/test_context.py).
 * Here: the front end's reader parses every turn and pointer of it, and its
 * writers, given the same turns, write the same JSON.
 */
import * as fs from 'fs';
import * as path from 'path';

import {
  ITurn,
  METADATA_KEY,
  METADATA_VERSION,
  cellMetadataFor,
  conversationValue,
  readCellTag,
  readConversation,
  updateTurn
} from '../metadata';
import {
  ISuggestionCandidate,
  accept,
  emptySuggestion,
  insert,
  reject,
  solutionCode
} from '../suggestions';

const GOLDEN = path.resolve(
  __dirname,
  '..',
  '..',
  'tests',
  'data',
  'turns.golden.ipynb'
);

// The golden turns' ids, by what became of them (tests/golden_turns.py).
const ACCEPTED = '5c0f3a9b2e71';
const REJECTED = 'a83d61f0c24e';
const EDITED = '0d9e4b7a13c5';
const EDIT = 'e61c08f4a9d2';
const EXPLAIN_FAILED = '3fa7c2d90b18';
const PENDING = 'b4e91d7c0a36';

interface IGoldenCell {
  id: string;
  cell_type: string;
  source: string | string[];
  metadata: Record<string, unknown>;
}

interface IGoldenNotebook {
  cells: IGoldenCell[];
  metadata: Record<string, unknown>;
}

function load(): IGoldenNotebook {
  return JSON.parse(fs.readFileSync(GOLDEN, 'utf8'));
}

/** The stored value under METADATA_KEY, as in the file. */
function store(nb: IGoldenNotebook): {
  version: number;
  strategy: string;
  turns: Record<string, unknown>[];
} {
  return nb.metadata[METADATA_KEY] as any;
}

function sourceOf(cell: IGoldenCell): string {
  return Array.isArray(cell.source) ? cell.source.join('') : cell.source;
}

function turnOf(nb: IGoldenNotebook, turnId: string): ITurn {
  const turn = readConversation(nb.metadata).turns.find(
    t => t.turn_id === turnId
  );
  if (!turn) {
    throw new Error(`no golden turn ${turnId}`);
  }
  return turn;
}

function cellOf(nb: IGoldenNotebook, id: string): IGoldenCell {
  const cell = nb.cells.find(c => c.id === id);
  if (!cell) {
    throw new Error(`no golden cell ${id}`);
  }
  return cell;
}

function candidatesOf(turn: ITurn): ISuggestionCandidate[] {
  return turn.candidates.map((code, i) => ({
    code,
    explanation: turn.explanations?.[i] ?? '',
    steps: []
  }));
}

/** Ids handed out in order, as the suggestion's new cells get them. */
function ids(...list: string[]): () => string {
  const queue = [...list];
  return () => {
    const id = queue.shift();
    if (!id) {
      throw new Error('more cells than expected');
    }
    return id;
  };
}

describe('the golden notebook (tests/data/turns.golden.ipynb)', () => {
  it('reads every turn with every field it stores', () => {
    const nb = load();
    const conversation = readConversation(nb.metadata);
    expect(conversation.version).toBe(METADATA_VERSION);
    expect(store(nb).version).toBe(METADATA_VERSION);
    // Nothing stored is lost or changed by the reader.
    expect(conversation.turns).toStrictEqual(store(nb).turns);
    const byId = new Map(conversation.turns.map(t => [t.turn_id, t]));
    expect(conversation.turns.map(t => t.turn_id)).toEqual([
      ACCEPTED,
      REJECTED,
      EDITED,
      EDIT,
      EXPLAIN_FAILED,
      PENDING
    ]);
    expect(conversation.turns.map(t => t.status)).toEqual([
      'accepted',
      'rejected',
      'edited',
      'accepted',
      'pending',
      'pending'
    ]);

    const accepted = byId.get(ACCEPTED)!;
    expect(accepted.strategy).toBe('vote');
    expect(accepted.cell_ids).toHaveLength(2);
    expect(accepted.explanations).toHaveLength(accepted.candidates.length);
    expect(accepted.confinement?.status).toBe('partial');
    expect(accepted.confinement?.missing).toEqual(['seccomp']);
    expect(accepted.previews?.map(p => p?.[0].output_type)).toEqual([
      'execute_result',
      'error'
    ]);
    expect(typeof accepted.created).toBe('number');

    const rejected = byId.get(REJECTED)!;
    expect(rejected.code).toBe(rejected.candidates[0]);
    const image = rejected.previews?.[0]?.[0].data as Record<string, string>;
    expect(image['image/png']).toMatch(/^iVBOR/);

    const edited = byId.get(EDITED)!;
    expect(edited.code).not.toBe(edited.candidates[0]);

    const edit = byId.get(EDIT)!;
    expect(edit.edits_cell).toBe(edit.cell_ids[0]);
    for (const turn of conversation.turns) {
      if (turn.turn_id !== EDIT) {
        expect(turn.edits_cell).toBeUndefined();
      }
    }

    const explain = byId.get(EXPLAIN_FAILED)!;
    expect(explain.strategy).toBe('explain');
    expect(explain.failure).toEqual({
      status: 'error',
      reason: expect.stringContaining('no explanation')
    });
    expect(explain.candidates).toEqual([]);
    expect(explain.previews).toBeUndefined();

    const pending = byId.get(PENDING)!;
    expect(pending.confinement).toMatchObject({
      status: 'not_executed',
      execute: false
    });
    expect(pending.previews).toEqual([null, null]);
    expect(
      conversation.turns.filter(t => t.confinement).map(t => t.turn_id)
    ).toEqual([ACCEPTED, PENDING]);
    expect(
      conversation.turns.filter(t => t.failure).map(t => t.turn_id)
    ).toEqual([EXPLAIN_FAILED]);
  });

  it('reads every cell pointer, as the writer makes it from its turn', () => {
    const nb = load();
    const conversation = readConversation(nb.metadata);
    const tags = nb.cells
      .map(cell => ({ id: cell.id, tag: readCellTag(cell.metadata) }))
      .filter(c => c.tag !== null);
    expect(tags.map(c => [c.id, c.tag!.turn_id, c.tag!.status])).toEqual([
      [turnOf(nb, ACCEPTED).cell_ids[0], ACCEPTED, 'accepted'],
      [turnOf(nb, ACCEPTED).cell_ids[1], ACCEPTED, 'accepted'],
      [turnOf(nb, EDITED).cell_ids[0], EDITED, 'edited'],
      [turnOf(nb, EDIT).cell_ids[0], EDIT, 'accepted'],
      [turnOf(nb, PENDING).cell_ids[0], PENDING, 'pending']
    ]);
    for (const cell of nb.cells) {
      const tag = readCellTag(cell.metadata);
      if (!tag) {
        expect(cell.metadata[METADATA_KEY]).toBeUndefined();
        continue;
      }
      const turn = conversation.turns.find(t => t.turn_id === tag.turn_id)!;
      expect(turn.cell_ids).toContain(cell.id);
      expect(cell.metadata[METADATA_KEY]).toStrictEqual(tag);
      expect(cellMetadataFor(turn)).toStrictEqual(tag);
    }
    // The rejected turn's cell was removed; its id is still recorded.
    const cellIds = nb.cells.map(c => c.id);
    for (const id of turnOf(nb, REJECTED).cell_ids) {
      expect(cellIds).not.toContain(id);
    }
  });

  it('writes the same turns back as they are stored', () => {
    const nb = load();
    const stored = store(nb);
    const conversation = readConversation(nb.metadata);
    // Over the stored value: its other keys (the composer's strategy) kept.
    expect(conversationValue(stored, conversation)).toStrictEqual(stored);
    // From nothing: the version and the turns.
    expect(conversationValue(undefined, conversation)).toStrictEqual({
      version: METADATA_VERSION,
      turns: stored.turns
    });
    // Read back, the same conversation.
    expect(
      readConversation({
        [METADATA_KEY]: conversationValue(stored, conversation)
      })
    ).toStrictEqual(conversation);
  });

  it('changes one turn in place, the others kept as they are', () => {
    const nb = load();
    const stored = store(nb);
    const written = conversationValue(
      stored,
      updateTurn(readConversation(nb.metadata), PENDING, {
        status: 'accepted'
      })
    ) as typeof stored;
    expect(written.strategy).toBe(stored.strategy);
    expect(written.turns).toStrictEqual(
      stored.turns.map(t =>
        t.turn_id === PENDING ? { ...t, status: 'accepted' } : t
      )
    );
  });

  it("lays out the suggestion cells with the golden cells' source and pointer", () => {
    const nb = load();

    // Pending, one cell: inserted with its tag, the turn's code its source.
    const pending = turnOf(nb, PENDING);
    const pendingCell = cellOf(nb, pending.cell_ids[0]);
    const shown = insert(emptySuggestion(PENDING, pending.intent), {
      candidates: candidatesOf(pending),
      index: 0,
      mode: 'single',
      anchor: { afterId: null, index: 0 },
      newId: ids(pendingCell.id)
    });
    expect(shown.decision).toBe('pending');
    expect(shown.changes).toEqual([
      expect.objectContaining({
        op: 'insert',
        cell: {
          id: pendingCell.id,
          cell_type: 'code',
          source: sourceOf(pendingCell),
          tag: pendingCell.metadata[METADATA_KEY]
        }
      })
    ]);
    expect(solutionCode(shown.state.cells)).toBe(pending.code);

    // Accepted per step: a markdown cell and a code cell, both tagged.
    const accepted = turnOf(nb, ACCEPTED);
    const [md, code] = accepted.cell_ids.map(id => cellOf(nb, id));
    const perStep: ISuggestionCandidate[] = candidatesOf(accepted).map(
      (c, i) => ({
        ...c,
        steps:
          i === 0
            ? [{ number: 1, explanation: c.explanation, code: sourceOf(code) }]
            : []
      })
    );
    const offered = insert(emptySuggestion(ACCEPTED, accepted.intent), {
      candidates: perStep,
      index: 0,
      mode: 'perStep',
      anchor: { afterId: null, index: 0 },
      newId: ids(md.id, code.id)
    });
    const kept = accept(offered.state);
    expect(kept.decision).toBe('accepted');
    expect(
      kept.state.cells.map(c => ({
        id: c.id,
        cell_type: c.cell_type,
        source: c.source,
        metadata: { [METADATA_KEY]: c.tag }
      }))
    ).toStrictEqual(
      [md, code].map(c => ({
        id: c.id,
        cell_type: c.cell_type,
        source: sourceOf(c),
        metadata: c.metadata
      }))
    );
    expect(kept.state.cells.map(c => c.id)).toEqual(accepted.cell_ids);
    expect(solutionCode(kept.state.cells)).toBe(accepted.code);

    // An edit turn: the user's cell takes the candidate and the tag.
    const edit = turnOf(nb, EDIT);
    const target = cellOf(nb, edit.edits_cell!);
    const diff = insert(emptySuggestion(EDIT, edit.intent), {
      candidates: candidatesOf(edit),
      index: 0,
      mode: 'single',
      anchor: { afterId: null, index: 0 },
      target: {
        id: target.id,
        original: "flights['dep_dealy'].max()",
        tag: null
      }
    });
    const fixed = accept(diff.state);
    expect(fixed.changes).toEqual([
      { op: 'setSource', id: target.id, source: sourceOf(target) },
      { op: 'setTag', id: target.id, tag: target.metadata[METADATA_KEY] }
    ]);
    expect(solutionCode(fixed.state.cells)).toBe(edit.code);
    expect(fixed.state.cells.map(c => c.id)).toEqual(edit.cell_ids);

    // Rejected: its cell removed, the id it had is what the turn records.
    const rejected = turnOf(nb, REJECTED);
    const offer = insert(emptySuggestion(REJECTED, rejected.intent), {
      candidates: candidatesOf(rejected),
      index: 0,
      mode: 'single',
      anchor: { afterId: null, index: 0 },
      newId: ids(rejected.cell_ids[0])
    });
    const gone = reject(offer.state);
    expect(gone.decision).toBe('rejected');
    expect(gone.changes).toEqual([{ op: 'remove', id: rejected.cell_ids[0] }]);
    expect(offer.state.cells.map(c => c.id)).toEqual(rejected.cell_ids);
    expect(offer.state.candidates[offer.state.index].code).toBe(rejected.code);
  });
});
