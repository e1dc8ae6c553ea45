import {
  METADATA_KEY,
  ITurn,
  cellMetadataFor,
  conversationValue,
  newTurnId,
  orderTimeline,
  readCellTag,
  updateTurn,
  readConversation,
  setTurnStatus,
  upsertTurn
} from '../metadata';
import { PREVIEW_BUDGET, boundPreviews } from '../previews';
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

  it('keeps unknown store keys and a newer version when it writes', () => {
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
    missing: ['seccomp'],
    transport: 'kernel channel'
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

describe('the panel timeline', () => {
  const at = (id: string, created: number | null): ITurn => ({
    ...turn(id, `q ${id}`),
    created
  });
  const live = (turnId: string | null, createdMs: number) => ({
    turnId,
    created: createdMs
  });

  it('keeps a stopped request before the turns asked after it', () => {
    // Stopped at t=10 s (not stored), then a turn asked at t=20 s was stored.
    const stopped = live(null, 10_000);
    const second = live('b', 20_000);
    const order = orderTimeline([at('a', 5), at('b', 20)], [stopped, second]);
    expect(order.map(e => e.turn?.turn_id ?? 'live')).toEqual([
      'a',
      'live',
      'b'
    ]);
    expect(order[2].item).toBe(second);
  });

  it('puts stored turns in their stored order, live ones with them', () => {
    const a = live('a', 1_000);
    const order = orderTimeline([at('a', 1), at('c', 3)], [a]);
    expect(order.map(e => [e.turn?.turn_id, e.item])).toEqual([
      ['a', a],
      ['c', null]
    ]);
  });

  it('puts a request newer than every turn (or turns without a time) last', () => {
    const fresh = live(null, 99_000);
    const order = orderTimeline([at('a', null), at('b', 2)], [fresh]);
    expect(order.map(e => e.turn?.turn_id ?? 'live')).toEqual([
      'a',
      'b',
      'live'
    ]);
  });

  it('keeps two unstored requests in the order they were asked', () => {
    const one = live(null, 1_000);
    const two = live(null, 2_000);
    const order = orderTimeline([at('x', 3)], [one, two]);
    expect(order.map(e => e.item)).toEqual([one, two, null]);
  });
});

describe('failed turns and previews in metadata', () => {
  it('reads a failure and previews back, tolerating bad ones', () => {
    const conversation = readConversation({
      [METADATA_KEY]: {
        version: 1,
        turns: [
          {
            ...turn('a', 'stopped'),
            failure: { status: 'cancelled', reason: 'by you' },
            previews: [[{ output_type: 'stream', name: 'stdout', text: 'hi' }]]
          },
          { ...turn('b', 'odd'), failure: 'boom', previews: ['x', null] },
          {
            ...turn('c', 'bad outputs'),
            previews: [[{ nope: 1 }, { output_type: 'stream', text: 'ok' }]]
          }
        ]
      }
    });
    const [a, b, c] = conversation.turns;
    expect(a.failure).toEqual({ status: 'cancelled', reason: 'by you' });
    expect(a.previews).toEqual([
      [{ output_type: 'stream', name: 'stdout', text: 'hi' }]
    ]);
    expect('failure' in b).toBe(false);
    expect(b.previews).toEqual([null, null]);
    expect(c.previews).toEqual([[{ output_type: 'stream', text: 'ok' }]]);
  });

  it('bounds previews to the budget, clipping text and dropping big images', () => {
    const longText = 'x'.repeat(50_000);
    const bigImage = 'A'.repeat(100_000);
    const bounded = boundPreviews([
      [
        { output_type: 'stream', name: 'stdout', text: longText },
        {
          output_type: 'display_data',
          data: { 'image/png': bigImage, 'text/plain': '<Figure>' },
          metadata: {}
        },
        {
          output_type: 'execute_result',
          data: { 'text/html': '<b>small</b>', 'text/plain': 'small' },
          metadata: {},
          execution_count: 3
        }
      ],
      null
    ]);
    expect(JSON.stringify(bounded).length).toBeLessThan(PREVIEW_BUDGET);
    const [outputs, none] = bounded;
    expect(none).toBeNull();
    const text = outputs![0].text as string;
    expect(text.startsWith('xxxx')).toBe(true);
    expect(text).toContain('more characters not kept');
    // The image does not fit: its text stands in for it.
    expect(outputs![1].data).toEqual({ 'text/plain': '<Figure>' });
    // A small rich output is kept as it was.
    expect(outputs![2].data).toEqual({
      'text/plain': 'small',
      'text/html': '<b>small</b>'
    });
  });

  it('keeps a small image and notes the outputs past the budget', () => {
    const image = 'A'.repeat(3_000);
    const many = Array.from({ length: 40 }, () => ({
      output_type: 'display_data',
      data: { 'image/png': image },
      metadata: {}
    }));
    const [outputs] = boundPreviews([many], 10_000);
    expect(outputs![0].data).toEqual({ 'image/png': image });
    expect(outputs!.length).toBeLessThan(40);
    const note = outputs![outputs!.length - 1];
    expect(note.output_type).toBe('stream');
    expect(note.text).toMatch(/more outputs? not kept/);
  });

  it('keeps the end of a long traceback', () => {
    const traceback = Array.from({ length: 500 }, (_, i) => `frame ${i}`);
    const [outputs] = boundPreviews([
      [{ output_type: 'error', ename: 'KeyError', evalue: "'a'", traceback }]
    ]);
    const kept = outputs![0].traceback as string[];
    expect(kept[kept.length - 1]).toBe('frame 499');
    expect(kept.length).toBeLessThan(500);
  });
});
