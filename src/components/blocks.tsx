/**
 * What the model wrote and what its code printed, rendered by JupyterLab's
 * own rendermime (so the panel follows the theme and renders outputs like
 * the notebook): code with its Copy and Insert buttons, streamed text,
 * Markdown, and output areas. Model text and outputs are untrusted data.
 */
import { Clipboard } from '@jupyterlab/apputils';
import type * as nbformat from '@jupyterlab/nbformat';
import {
  OutputArea,
  OutputAreaModel,
  SimplifiedOutputArea
} from '@jupyterlab/outputarea';
import {
  IRenderMime,
  IRenderMimeRegistry,
  MimeModel
} from '@jupyterlab/rendermime';
import * as React from 'react';

import { IStoredOutput } from '../previews';
import { previewOutputs } from '../models';
import type { Candidate, Confinement } from '../wire';
import { LuminoHost } from './LuminoHost';

/**
 * Python code with a Copy button. (Insert is the candidate bar's one
 * button: a second one here showed two on every undecided turn.)
 */
export function CodeBlock(props: {
  code: string;
  rendermime: IRenderMimeRegistry;
}) {
  const { code, rendermime } = props;
  const [copied, setCopied] = React.useState(false);
  React.useEffect(() => {
    if (!copied) {
      return;
    }
    const timer = window.setTimeout(() => setCopied(false), 1500);
    return () => window.clearTimeout(timer);
  }, [copied]);
  return (
    <div className="jp-DataAgent-codeWrap">
      <div className="jp-DataAgent-codeTools">
        <button
          type="button"
          className="jp-DataAgent-toolButton jp-DataAgent-copy"
          title="Copy the code to the clipboard"
          onClick={() => {
            Clipboard.copyToSystem(code);
            setCopied(true);
          }}
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
      </div>
      <HighlightedCode code={code} rendermime={rendermime} />
    </div>
  );
}

/** Python code, highlighted through the markdown renderer's code fences. */
function HighlightedCode(props: {
  code: string;
  rendermime: IRenderMimeRegistry;
}) {
  const { code, rendermime } = props;
  return (
    <LuminoHost
      className="jp-DataAgent-code"
      deps={[code]}
      make={() => {
        const renderer = rendermime.createRenderer('text/markdown');
        const fence = code.includes('```') ? '~~~~' : '```';
        void renderer.renderModel(
          new MimeModel({
            data: { 'text/markdown': `${fence}python\n${code}\n${fence}` },
            trusted: false
          })
        );
        return renderer;
      }}
    />
  );
}

/**
 * The text the model is writing, re-rendered in place as it grows: Markdown
 * with its code fences highlighted (bare code is shown as Python). One
 * renderer for the whole stream, so the block does not flicker.
 */
export function StreamingText(props: {
  text: string;
  rendermime: IRenderMimeRegistry;
}) {
  const { text, rendermime } = props;
  const renderer = React.useRef<IRenderMime.IRenderer | null>(null);
  React.useEffect(() => {
    const source = /```|~~~/.test(text) ? text : '```python\n' + text + '\n```';
    void renderer.current?.renderModel(
      new MimeModel({ data: { 'text/markdown': source }, trusted: false })
    );
  }, [text]);
  return (
    <LuminoHost
      className="jp-DataAgent-code jp-DataAgent-streaming"
      deps={[]}
      make={() => {
        renderer.current = rendermime.createRenderer('text/markdown');
        return renderer.current;
      }}
    />
  );
}

/**
 * Model-written Markdown (an explanation), rendered by JupyterLab's own
 * Markdown renderer as untrusted data: HTML is sanitized, no script runs.
 */
export function MarkdownBlock(props: {
  source: string;
  rendermime: IRenderMimeRegistry;
  className: string;
}) {
  const { source, rendermime, className } = props;
  return (
    <LuminoHost
      className={className}
      deps={[source]}
      make={() => {
        const renderer = rendermime.createRenderer('text/markdown');
        void renderer.renderModel(
          new MimeModel({ data: { 'text/markdown': source }, trusted: false })
        );
        return renderer;
      }}
    />
  );
}

/** The executed output preview, rendered like a notebook output area. */
export function OutputPreview(props: {
  candidate: Candidate;
  rendermime: IRenderMimeRegistry;
  confinement: Confinement | null;
}) {
  const { candidate, rendermime, confinement } = props;
  if (confinement && !confinement.execute) {
    // Whatever came with the candidate, it did not run: say why, show nothing else.
    return (
      <div className="jp-DataAgent-noOutput jp-mod-notExecuted">
        Not executed{confinement.message ? `: ${confinement.message}` : '.'}
      </div>
    );
  }
  const outputs = previewOutputs(candidate.result);
  if (!candidate.result) {
    return <div className="jp-DataAgent-noOutput">Not executed</div>;
  }
  if (!outputs.length) {
    return <div className="jp-DataAgent-noOutput">Ran without output</div>;
  }
  return <OutputsView outputs={outputs} rendermime={rendermime} />;
}

/** Outputs (nbformat v4) rendered like a notebook output area. */
export function OutputsView(props: {
  outputs: readonly IStoredOutput[];
  rendermime: IRenderMimeRegistry;
}) {
  const { outputs, rendermime } = props;
  return (
    <LuminoHost
      className="jp-DataAgent-output"
      deps={[outputs]}
      make={() => {
        // Untrusted: HTML is sanitized, scripts do not run.
        const model = new OutputAreaModel({
          values: outputs as nbformat.IOutput[],
          trusted: false
        });
        const area: OutputArea = new SimplifiedOutputArea({
          model,
          rendermime
        });
        area.disposed.connect(() => model.dispose());
        return area;
      }}
    />
  );
}
