/**
 * What accepting a candidate will change (`nsdiff.namespaceChanges`), as one
 * line with the names in code font; nothing when the copy could not tell.
 */
import * as React from 'react';

import { NAMESPACE_TITLE, codeSpans } from '../nsdiff';

export function ChangesLine(props: { changes: string }) {
  if (!props.changes) {
    return null;
  }
  return (
    <div
      className="jp-DataAgent-changes"
      title={NAMESPACE_TITLE}
      tabIndex={0}
      aria-label={`If accepted and run, it ${props.changes}. ${NAMESPACE_TITLE}`}
    >
      <span className="jp-DataAgent-changesLabel">If run: </span>
      {codeSpans(props.changes).map((part, i) =>
        part.code ? (
          <code key={i} className="jp-DataAgent-changesName">
            {part.text}
          </code>
        ) : (
          part.text
        )
      )}
    </div>
  );
}
