/**
 * The sidebar's model line and the "Connect a model" dialog's choices
 * (src/connect.ts), from the wire types the server sends.
 */
import { modelChoices, modelLine, notFound, sameChoice } from '../connect';
import type { ModelServer } from '../wire';

const OLLAMA: ModelServer = {
  label: 'Ollama',
  base_url: 'http://127.0.0.1:11434/v1',
  models: ['llama3.2:3b', 'qwen2.5-coder:7b'],
  error: ''
};
const VLLM_MISSING: ModelServer = {
  label: 'vLLM',
  base_url: 'http://127.0.0.1:8000/v1',
  models: [],
  error:
    'Nothing answers at http://127.0.0.1:8000/v1 (is the server running, on this port?).'
};

describe('modelLine', () => {
  it('says the embedded model is small and weak at code', () => {
    expect(
      modelLine({
        name: 'SmolLM2-135M-Instruct',
        kind: 'embedded',
        note: 'small and weak at code'
      })
    ).toBe('SmolLM2-135M-Instruct, embedded, small and weak at code');
  });

  it('names an endpoint model and where it is served', () => {
    expect(
      modelLine({
        name: 'llama3.2:3b',
        kind: 'openai',
        note: 'at 127.0.0.1:11434'
      })
    ).toBe('llama3.2:3b, openai, at 127.0.0.1:11434');
  });

  it('is empty while the server has not answered', () => {
    expect(modelLine(null)).toBe('');
  });
});

describe('modelChoices', () => {
  it('lists every model of the servers that answered, with its server', () => {
    expect(modelChoices([VLLM_MISSING, OLLAMA])).toEqual([
      { base_url: OLLAMA.base_url, model: 'llama3.2:3b', label: 'Ollama' },
      { base_url: OLLAMA.base_url, model: 'qwen2.5-coder:7b', label: 'Ollama' }
    ]);
  });

  it('tells a model from the same name on another server', () => {
    const [first] = modelChoices([OLLAMA]);
    expect(sameChoice(first, { ...first })).toBe(true);
    expect(sameChoice(first, { ...first, base_url: 'http://other/v1' })).toBe(
      false
    );
    expect(sameChoice(first, null)).toBe(false);
  });
});

describe('notFound', () => {
  it('names the places where nothing answered', () => {
    expect(notFound([OLLAMA, VLLM_MISSING])).toBe('Nothing found: vLLM.');
    expect(notFound([OLLAMA])).toBe('');
  });
});
