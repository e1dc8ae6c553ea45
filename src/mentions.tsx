/**
 * `@variable` mentions in the composer: typing `@` offers the live kernel's
 * DataFrames and Series (from the server's silent schema inspection,
 * `GET variables`); the server reads `@name` back out of the intent and gives
 * that frame its full schema, first in the prompt. The text stays as typed,
 * so the model reads "@df" where the user wrote it.
 *
 * The pure parts (where a mention is being typed, matching, inserting) are
 * exported for the tests; `useMentions` wires them to a textarea with a
 * keyboard-driven listbox (↑/↓, Enter or Tab picks, Escape closes).
 */
import * as React from 'react';

import { getVariables } from './handler';
import type { VariableInfo, VariablesReply } from './wire';

/** The `@query` being typed: `start` is the `@`, `end` the caret. */
export interface IMentionQuery {
  start: number;
  end: number;
  query: string;
}

/** The server's rule (kernel/schema.py `MENTION`): `@identifier`, not inside a word or address. */
const MENTION = /(?<![\w@.])@([A-Za-z_][A-Za-z0-9_]*)\b/;
const TYPING = /(?:^|[^\w@.])@([A-Za-z_][A-Za-z0-9_]*)?$/;

/** How many matches the popup lists. */
export const MAX_OPTIONS = 8;

/** The mention being typed at `caret`, or null when the caret is not in one. */
export function mentionAt(text: string, caret: number): IMentionQuery | null {
  const before = text.slice(0, caret);
  const match = TYPING.exec(before);
  if (!match) {
    return null;
  }
  // The caret must end the word: "@df|x" is being typed, "@d|f" is an edit inside it.
  if (/^[A-Za-z0-9_]/.test(text.slice(caret))) {
    return null;
  }
  const query = match[1] ?? '';
  return { start: caret - query.length - 1, end: caret, query };
}

/** The `@names` of a text, first mention first, each once (what the server gives in full). */
export function mentionsIn(text: string): string[] {
  const names: string[] = [];
  const pattern = new RegExp(MENTION.source, 'g');
  let match: RegExpExecArray | null;
  while ((match = pattern.exec(text)) !== null) {
    if (!names.includes(match[1])) {
      names.push(match[1]);
    }
  }
  return names;
}

/** Variables whose name starts with the query first, then those containing it; case-insensitive. */
export function matchVariables(
  variables: readonly VariableInfo[],
  query: string,
  limit = MAX_OPTIONS
): VariableInfo[] {
  const q = query.toLowerCase();
  const starts = variables.filter(v => v.name.toLowerCase().startsWith(q));
  const contains = variables.filter(
    v => !v.name.toLowerCase().startsWith(q) && v.name.toLowerCase().includes(q)
  );
  return [...starts, ...contains].slice(0, limit);
}

/** The text with the typed `@query` replaced by `@name ` and where the caret goes. */
export function insertMention(
  text: string,
  at: IMentionQuery,
  name: string
): { text: string; caret: number } {
  const after = text.slice(at.end);
  const spacer = /^\s/.test(after) ? '' : ' ';
  const inserted = `@${name}${spacer}`;
  return {
    text: text.slice(0, at.start) + inserted + after,
    caret: at.start + inserted.length
  };
}

/** "DataFrame · 891 × 12 · a, b, c, …" / "Series · 3 rows". */
export function describeVariable(v: VariableInfo): string {
  if (v.kind === 'Series') {
    const rows = v.shape[0] ?? 0;
    return `Series · ${rows.toLocaleString('en-US')} row${rows === 1 ? '' : 's'}`;
  }
  const [rows = 0, cols = v.total_columns] = v.shape;
  const names = v.columns.join(', ');
  const more = v.total_columns > v.columns.length ? ', …' : '';
  const shape = `${rows.toLocaleString('en-US')} × ${cols.toLocaleString('en-US')}`;
  return `DataFrame · ${shape}${names ? ` · ${names}${more}` : ''}`;
}

type Listing =
  | { status: 'loading' }
  | { status: 'ready'; variables: VariableInfo[] }
  | { status: 'unavailable'; reason: string };

/** What the popup says instead of options (null: it lists options). */
export function popupMessage(
  listing: Listing,
  options: readonly VariableInfo[],
  query: string
): string | null {
  if (listing.status === 'loading') {
    return 'Reading the kernel’s variables…';
  }
  if (listing.status === 'unavailable') {
    return listing.reason;
  }
  if (options.length) {
    return null;
  }
  return listing.variables.length
    ? `No DataFrame or Series named like “${query}”.`
    : 'No DataFrames or Series in the kernel yet.';
}

/** Listings are re-read when older than this (the user may have run a cell). */
const FRESH_MS = 3000;
let popupIds = 0;

export interface IMentions {
  /** Handles the popup's keys; true when the key was used (the composer ignores it then). */
  onKeyDown: (event: React.KeyboardEvent<HTMLTextAreaElement>) => boolean;
  /** Call with the textarea after every change or caret move. */
  onCaret: (area: HTMLTextAreaElement) => void;
  /** ARIA attributes for the textarea. */
  inputProps: React.TextareaHTMLAttributes<HTMLTextAreaElement>;
  popup: React.ReactElement | null;
}

/**
 * `@` completion for a textarea. `kernelId` reads the notebook's kernel at
 * the moment the popup opens (it changes on a restart).
 */
export function useMentions(props: {
  text: string;
  setText: (text: string) => void;
  kernelId: () => string | null;
  input: React.RefObject<HTMLTextAreaElement>;
}): IMentions {
  const { text, setText, kernelId, input } = props;
  const [caret, setCaret] = React.useState<number | null>(null);
  const [active, setActive] = React.useState(0);
  const [dismissed, setDismissed] = React.useState<number | null>(null);
  const id = React.useMemo(() => `jp-DataAgent-mentions-${++popupIds}`, []);

  const at = caret === null ? null : mentionAt(text, caret);
  const open = at !== null && dismissed !== at.start;
  const listing = useVariableListing(open, at?.start, kernelId);
  const options =
    open && listing.status === 'ready'
      ? matchVariables(listing.variables, at.query)
      : [];

  React.useEffect(() => setActive(0), [at?.start, at?.query]);

  const pick = (variable: VariableInfo) => {
    if (!at) {
      return;
    }
    const next = insertMention(text, at, variable.name);
    setText(next.text);
    setCaret(next.caret);
    setDismissed(at.start);
    requestAnimationFrame(() => {
      const area = input.current;
      if (area) {
        area.focus();
        area.setSelectionRange(next.caret, next.caret);
      }
    });
  };

  const onKeyDown = (event: React.KeyboardEvent<HTMLTextAreaElement>) => {
    if (!open || !at) {
      return false;
    }
    if (event.key === 'Escape') {
      setDismissed(at.start);
    } else if (!options.length) {
      return false;
    } else if (event.key === 'ArrowDown') {
      setActive((active + 1) % options.length);
    } else if (event.key === 'ArrowUp') {
      setActive((active - 1 + options.length) % options.length);
    } else if (
      (event.key === 'Enter' && !event.shiftKey) ||
      (event.key === 'Tab' && !event.shiftKey)
    ) {
      pick(options[Math.min(active, options.length - 1)]);
    } else {
      return false;
    }
    event.preventDefault();
    event.stopPropagation();
    return true;
  };

  const onCaret = (area: HTMLTextAreaElement) => {
    const position =
      area.selectionStart === area.selectionEnd ? area.selectionStart : null;
    setCaret(position);
    if (dismissed !== null && position !== null) {
      const typing = mentionAt(area.value, position);
      if (!typing || typing.start !== dismissed) {
        setDismissed(null);
      }
    }
  };

  const message = open ? popupMessage(listing, options, at.query) : null;
  const optionId = (i: number) => `${id}-option-${i}`;
  const showList = open && (options.length > 0 || message !== null);
  const popup = showList ? (
    <MentionsPopup
      id={id}
      message={message}
      options={options}
      active={active}
      optionId={optionId}
      pick={pick}
      setActive={setActive}
    />
  ) : null;

  const listed = open && options.length > 0;
  return {
    onKeyDown,
    onCaret,
    popup,
    inputProps: {
      'aria-autocomplete': 'list',
      'aria-controls': listed ? id : undefined,
      'aria-activedescendant': listed
        ? optionId(Math.min(active, options.length - 1))
        : undefined
    }
  };
}

/**
 * The kernel's DataFrames and Series while the popup is `open`, re-read when
 * the mention at `start` opens and the listing is stale or of another kernel.
 */
function useVariableListing(
  open: boolean,
  start: number | undefined,
  kernelId: () => string | null
): Listing {
  const [listing, setListing] = React.useState<Listing>({ status: 'loading' });
  const fetched = React.useRef<{ kernel: string; at: number } | null>(null);
  React.useEffect(() => {
    if (!open) {
      return;
    }
    const kernel = kernelId();
    if (!kernel) {
      setListing({
        status: 'unavailable',
        reason:
          'The notebook has no running kernel: start it to mention its DataFrames.'
      });
      return;
    }
    const last = fetched.current;
    if (last && last.kernel === kernel && Date.now() - last.at < FRESH_MS) {
      return;
    }
    fetched.current = { kernel, at: Date.now() };
    let current = true;
    if (!last || last.kernel !== kernel) {
      setListing({ status: 'loading' });
    }
    getVariables(kernel).then(
      (reply: VariablesReply) => {
        if (current) {
          setListing(
            reply.available
              ? { status: 'ready', variables: reply.variables }
              : { status: 'unavailable', reason: reply.reason }
          );
        }
      },
      (error: Error) => {
        fetched.current = null;
        if (current) {
          setListing({
            status: 'unavailable',
            reason: `Could not read the kernel’s variables: ${error.message}`
          });
        }
      }
    );
    return () => {
      current = false;
    };
  }, [open, start]);
  return listing;
}

/** The popup: a message, or the listbox of matching variables. */
function MentionsPopup(props: {
  id: string;
  message: string | null;
  options: readonly VariableInfo[];
  active: number;
  optionId: (i: number) => string;
  pick: (variable: VariableInfo) => void;
  setActive: (i: number) => void;
}) {
  const { id, message, options, active, optionId, pick, setActive } = props;
  return (
    <div className="jp-DataAgent-mentions">
      {message !== null ? (
        <div className="jp-DataAgent-mentionsMessage" role="status">
          {message}
        </div>
      ) : (
        <ul
          id={id}
          role="listbox"
          className="jp-DataAgent-mentionsList"
          aria-label="DataFrames and Series in the kernel"
        >
          {options.map((v, i) => (
            <li
              key={v.name}
              id={optionId(i)}
              role="option"
              aria-selected={i === active}
              className={
                'jp-DataAgent-mention' + (i === active ? ' jp-mod-active' : '')
              }
              onMouseDown={event => {
                event.preventDefault(); // keep the focus in the textarea
                pick(v);
              }}
              onMouseEnter={() => setActive(i)}
            >
              <span className="jp-DataAgent-mentionName">@{v.name}</span>
              <span
                className="jp-DataAgent-mentionDetail"
                title={describeVariable(v)}
              >
                {describeVariable(v)}
              </span>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
