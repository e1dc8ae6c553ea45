import {
  METADATA_KEY,
  ITurn,
  cellMetadataFor,
  conversationValue,
  newTurnId,
  readCellTag,
  updateTurn,
  readConversation,
  setTurnStatus,
  upsertTurn
} from '../metadata';
import type { Confinement } from '../wire';

const turn = (id: string, intent: string): ITurn => ({
  turn_id: id,
  intent,
  code: 'df.shape',
  status: 'pending',
  cell_ids: ['c1'],
  candidates: ['df.shape'],
  created: 1.5
});

describe('conversation metadata', () => {
  it('reads an absent conversation as empty', () => {
    expect(readConversation(undefined)).toEqual({ version: 1, turns: [] });
    expect(readConversation({})).toEqual({ version: 1, turns: [] });
  });

  it('round-trips the format written by the Python side', () => {
    const metadata = {
      [METADATA_KEY]: {
        version: 1,
        turns: [
          {
            turn_id: 't1',
            intent: 'How many rows?',
            code: 'len(df)',
            status: 'accepted',
            cell_ids: ['a'],
            candidates: ['len(df)', 'df.shape[0]'],
            created: 10
          }
        ]
      }
    };
    const conversation = readConversation(metadata);
    expect(conversation.turns).toHaveLength(1);
    expect(conversation.turns[0]).toEqual(
      (metadata[METADATA_KEY] as any).turns[0]
    );
  });

  it('drops malformed turns and defaults unknown fields', () => {
    const conversation = readConversation({
      [METADATA_KEY]: {
        version: 1,
        turns: [
          null,
          { intent: 'no id' },
          { turn_id: 't2', intent: 'Plot it', status: 'weird', cell_ids: [3] }
        ]
      }
    });
    expect(conversation.turns).toEqual([
      {
        turn_id: 't2',
        intent: 'Plot it',
        code: '',
        status: 'pending',
        cell_ids: [],
        candidates: [],
        created: null
      }
    ]);
  });

  it('upserts in place and appends new turns', () => {
    let conversation = upsertTurn(
      { version: 1, turns: [] },
      turn('a', 'first')
    );
    conversation = upsertTurn(conversation, turn('b', 'second'));
    conversation = upsertTurn(conversation, {
      ...turn('a', 'first'),
      code: 'x'
    });
    expect(conversation.turns.map(t => [t.turn_id, t.code])).toEqual([
      ['a', 'x'],
      ['b', 'df.shape']
    ]);
  });

  it('changes one status without touching the others', () => {
    const conversation = setTurnStatus(
      { version: 1, turns: [turn('a', 'first'), turn('b', 'second')] },
      'b',
      'rejected'
    );
    expect(conversation.turns.map(t => t.status)).toEqual([
      'pending',
      'rejected'
    ]);
    expect(cellMetadataFor(conversation.turns[1])).toEqual({
      turn_id: 'b',
      intent: 'second',
      status: 'rejected'
    });
  });

  it('makes distinct ids', () => {
    expect(newTurnId(5)).not.toEqual(newTurnId(5));
    expect(newTurnId(5).startsWith('t5-')).toBe(true);
  });
});

describe('front-end extras of the conversation format', () => {
  it('keeps explanations and strategy, which Python ignores', () => {
    const conversation = readConversation({
      [METADATA_KEY]: {
        version: 1,
        turns: [
          { ...turn('a', 'q'), explanations: ['Step 1: x'], strategy: 'vote' }
        ]
      }
    });
    expect(conversation.turns[0].explanations).toEqual(['Step 1: x']);
    expect(conversation.turns[0].strategy).toBe('vote');
  });

  it('writes like write_turns: unknown keys kept, newer version kept', () => {
    const value = conversationValue(
      { version: 2, exported: true, turns: [] },
      { version: 1, turns: [turn('a', 'q')] }
    );
    expect(value).toEqual({
      version: 2,
      exported: true,
      turns: [turn('a', 'q')]
    });
    expect(conversationValue(undefined, { version: 1, turns: [] })).toEqual({
      version: 1,
      turns: []
    });
  });

  it('updates one turn and reads cell pointers', () => {
    const conversation = updateTurn(
      { version: 1, turns: [turn('a', 'q'), turn('b', 'r')] },
      'b',
      { status: 'edited', code: 'df.head()' }
    );
    expect(conversation.turns[1]).toMatchObject({
      status: 'edited',
      code: 'df.head()'
    });
    expect(conversation.turns[0].status).toBe('pending');
    expect(
      readCellTag({
        [METADATA_KEY]: { turn_id: 'a', intent: 'q', status: 'bogus' }
      })
    ).toEqual({
      turn_id: 'a',
      intent: 'q',
      status: 'pending'
    });
    expect(readCellTag({ [METADATA_KEY]: { intent: 'no id' } })).toBeNull();
    expect(readCellTag(undefined)).toBeNull();
  });
});

describe('confinement verdict stored with the turn', () => {
  const confinement: Confinement = {
    policy: 'require',
    status: 'not_executed',
    execute: false,
    message: 'candidates were generated but not run',
    layers: [
      {
        name: 'landlock_fs',
        on: true,
        detail: 'files read-only outside scratch'
      },
      { name: 'seccomp', on: false, detail: 'libseccomp is not installed' }
    ],
    missing: ['seccomp']
  };

  it('survives a write and a read back (a reload)', () => {
    const written = conversationValue(undefined, {
      version: 1,
      turns: [{ ...turn('a', 'q'), confinement }]
    });
    // The notebook stores plain JSON.
    const reloaded = readConversation({
      [METADATA_KEY]: JSON.parse(JSON.stringify(written))
    });
    expect(reloaded.turns[0].confinement).toEqual(confinement);
  });

  it('is a copy: the stored value does not share the live view', () => {
    const live = {
      ...confinement,
      layers: confinement.layers.map(l => ({ ...l }))
    };
    const written = conversationValue(undefined, {
      version: 1,
      turns: [{ ...turn('a', 'q'), confinement: live }]
    });
    live.layers[0].on = false;
    expect((written.turns as any)[0].confinement.layers[0].on).toBe(true);
  });

  it('is kept when the decision changes', () => {
    let conversation = upsertTurn(
      { version: 1, turns: [] },
      { ...turn('a', 'q'), confinement }
    );
    conversation = setTurnStatus(conversation, 'a', 'accepted');
    conversation = updateTurn(conversation, 'a', { code: 'len(df)' });
    expect(conversation.turns[0]).toMatchObject({
      status: 'accepted',
      code: 'len(df)',
      confinement
    });
  });

  it('is absent for older turns and dropped when malformed', () => {
    const conversation = readConversation({
      [METADATA_KEY]: {
        version: 1,
        turns: [
          turn('old', 'from before confinement'),
          { ...turn('bad', 'bad verdict'), confinement: { status: 'mostly' } },
          { ...turn('str', 'string verdict'), confinement: 'confined' }
        ]
      }
    });
    expect(conversation.turns).toHaveLength(3);
    for (const t of conversation.turns) {
      expect('confinement' in t).toBe(false);
    }
    // A turn without a verdict writes no key (what Python wrote stays byte-equal).
    expect(conversationValue(undefined, conversation).turns).toEqual(
      conversation.turns.map(t => ({ ...t }))
    );
  });
});
