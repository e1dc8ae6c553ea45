import { MAX_INTENT_CHARS, intentProblem } from '../models';
// The schema generated from the server's models (server/models.py).
import schema from '../wire.schema.json';

describe('intentProblem', () => {
  it('follows the server: the same limit as the TurnRequest schema', () => {
    const defs = (schema as any).$defs;
    expect(defs.TurnRequestModel.properties.intent.maxLength).toBe(
      MAX_INTENT_CHARS
    );
  });

  it('lets a question up to the limit through', () => {
    expect(intentProblem('What is the mean delay?')).toBeNull();
    expect(intentProblem('x'.repeat(MAX_INTENT_CHARS))).toBeNull();
    // Surrounding blanks are trimmed before sending, so they do not count.
    expect(intentProblem(`  ${'x'.repeat(MAX_INTENT_CHARS)}\n\n`)).toBeNull();
  });

  it('says in words why a longer one is not sent', () => {
    expect(intentProblem('x'.repeat(MAX_INTENT_CHARS + 5))).toBe(
      'The question is 20,005 characters long; the server takes at most ' +
        '20,000. Shorten it, or put the long text in a cell and ask about ' +
        'that cell.'
    );
  });
});
