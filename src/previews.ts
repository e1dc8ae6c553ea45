/**
 * The outputs a turn keeps in the notebook file (its candidates' previews):
 * read back, and made small enough to store. Pure.
 */

/** One nbformat output as stored with a turn. */
export type IStoredOutput = Record<string, unknown> & { output_type: string };

export function asString(value: unknown, fallback = ''): string {
  return typeof value === 'string' ? value : fallback;
}

export function parsePreview(raw: unknown): IStoredOutput[] | null {
  if (!Array.isArray(raw)) {
    return null;
  }
  return raw.filter(
    (o): o is IStoredOutput =>
      !!o &&
      typeof o === 'object' &&
      typeof (o as Record<string, unknown>).output_type === 'string'
  );
}

/** What a turn's stored previews may hold, in characters of JSON. */
export const PREVIEW_BUDGET = 20000;
/** The longest text (stream, text/plain, traceback) kept in one output. */
export const PREVIEW_TEXT_CHARS = 2000;

function clip(text: string, limit: number): string {
  return text.length > limit
    ? `${text.slice(0, limit)}\n… (${text.length - limit} more characters not kept)`
    : text;
}

function joinText(value: unknown): string {
  return Array.isArray(value) ? value.join('') : asString(value);
}

/**
 * One output made small: texts clipped, rich data reduced to the first of
 * image/png, text/html that fits in `room` characters, else text/plain.
 */
function boundOutput(output: IStoredOutput, room: number): IStoredOutput {
  const limit = Math.min(PREVIEW_TEXT_CHARS, Math.max(200, room));
  switch (output.output_type) {
    case 'stream':
      return { ...output, text: clip(joinText(output.text), limit) };
    case 'error': {
      const traceback = Array.isArray(output.traceback)
        ? output.traceback.map(line => asString(line))
        : [];
      // The last lines say what went wrong; keep those.
      let kept: string[] = [];
      let size = 0;
      for (const line of [...traceback].reverse()) {
        if (size + line.length > limit) {
          break;
        }
        kept = [line, ...kept];
        size += line.length;
      }
      return {
        output_type: 'error',
        ename: asString(output.ename, 'Error'),
        evalue: clip(asString(output.evalue), limit),
        traceback: kept
      };
    }
    default: {
      const data = (output.data ?? {}) as Record<string, unknown>;
      const kept: Record<string, unknown> = {};
      const plain = joinText(data['text/plain']);
      if (plain) {
        kept['text/plain'] = clip(plain, limit);
      }
      const plainSize = plain ? Math.min(plain.length, limit) : 0;
      for (const mime of ['image/png', 'text/html']) {
        const value = joinText(data[mime]);
        if (value && value.length + plainSize <= room) {
          kept[mime] = value;
          break;
        }
      }
      if (!Object.keys(kept).length) {
        const mimes = Object.keys(data).join(', ') || 'no data';
        kept['text/plain'] = `(${mimes}: too large to keep in the notebook)`;
      }
      return {
        output_type: output.output_type,
        data: kept,
        metadata: {},
        ...(output.output_type === 'execute_result'
          ? { execution_count: null }
          : {})
      };
    }
  }
}

/**
 * Previews to store with a turn, one list per candidate (null: not
 * executed), within `budget` characters of JSON in all: later outputs get
 * what earlier ones left, and those past the budget are dropped with a note.
 */
export function boundPreviews(
  previews: (IStoredOutput[] | null)[],
  budget: number = PREVIEW_BUDGET
): (IStoredOutput[] | null)[] {
  let left = budget;
  return previews.map(outputs => {
    if (!outputs) {
      return null;
    }
    const kept: IStoredOutput[] = [];
    for (let i = 0; i < outputs.length; i++) {
      const room = left - 200;
      if (room < 200) {
        kept.push({
          output_type: 'stream',
          name: 'stdout',
          text: `(${outputs.length - i} more output${
            outputs.length - i === 1 ? '' : 's'
          } not kept in the notebook)`
        });
        break;
      }
      const small = boundOutput(outputs[i], room);
      left -= JSON.stringify(small).length;
      kept.push(small);
    }
    return kept;
  });
}
