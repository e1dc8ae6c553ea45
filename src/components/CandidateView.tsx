/**
 * One candidate of a turn: its result badge and facts (chosen, score, the
 * vote), its explanation or steps, its code and the output it printed.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import * as React from 'react';

import { namespaceChanges } from '../nsdiff';
import type { Candidate, Check, Confinement, ExecResult } from '../wire';
import { CodeBlock, MarkdownBlock, OutputPreview } from './blocks';
import { ChangesLine } from './ChangesLine';

function resultBadge(candidate: Candidate, executed: boolean): string {
  return executed ? runBadge(candidate.result) : '';
}

/** How a candidate ran, in words ("ran in 0.12 s", "error: KeyError"); '' when it did not. */
export function runBadge(
  result: Pick<ExecResult, 'status' | 'duration_s' | 'ename' | 'limit'> | null
): string {
  if (!result) {
    return '';
  }
  const time = result.duration_s ? ` in ${result.duration_s.toFixed(2)} s` : '';
  switch (result.status) {
    case 'ok':
      return `ran${time}`;
    case 'error':
      return `error${result.ename ? `: ${result.ename}` : ''}`;
    case 'timeout':
      return 'timed out';
    case 'died':
      return `stopped${result.limit ? ` (${result.limit} limit)` : ''}`;
  }
  return '';
}

/**
 * What a cell does: its explained steps as a list, numbered as the cell's
 * step comments are, else its explanation (live, and read back).
 */
export function Explanation(props: {
  steps: readonly { number: number; explanation: string }[];
  explanation: string | undefined;
  rendermime: IRenderMimeRegistry;
}) {
  const { steps, explanation, rendermime } = props;
  if (!steps.length) {
    return explanation ? (
      <MarkdownBlock
        source={explanation}
        rendermime={rendermime}
        className="jp-DataAgent-explanation"
      />
    ) : null;
  }
  return (
    <ol className="jp-DataAgent-steps">
      {steps.map(s => (
        <li key={s.number} value={s.number}>
          <MarkdownBlock
            source={s.explanation}
            rendermime={rendermime}
            className="jp-DataAgent-stepText"
          />
        </li>
      ))}
    </ol>
  );
}

/** What the vote says about one candidate: a short text and its explanation. */
export interface IVoteSummary {
  text: string;
  title: string;
}

/**
 * The vote as words, e.g. "3 of 5 agree (classes 3 · 1 · 1)": `support` is
 * the size of the candidate's answer class, `classes` the sizes of all the
 * classes that voted (largest first, from the turn's stats). Null when
 * nothing voted; the class sizes only when there was more than one class.
 */
export function voteSummary(
  support: number,
  classes: readonly number[]
): IVoteSummary | null {
  const total = classes.reduce((sum, size) => sum + size, 0);
  if (!classes.length || total <= 0) {
    return null;
  }
  const split = classes.length > 1;
  const samples = total === 1 ? 'sample' : 'samples';
  return {
    text:
      `${support} of ${total} agree` +
      (split ? ` (classes ${classes.join(' · ')})` : ''),
    title:
      'Samples whose outputs were the same answer: ' +
      `${support} of the ${total} ${samples} that voted gave this one` +
      (split
        ? `; the answer classes, largest first, hold ${classes.join(', ')}.`
        : '.')
  };
}

/**
 * The agreement line of one candidate: the vote's words for one that voted
 * with others or won (with the class sizes), else its own agreement check's
 * detail, e.g. "1 of 5 answers agree; the vote picked another answer" (a
 * minority answer the vote did not pick, or one that did not vote). Null
 * when nothing voted.
 */
export function agreementSummary(
  candidate: Pick<Candidate, 'support' | 'checks'>,
  chosen: boolean,
  classes: readonly number[]
): IVoteSummary | null {
  if (chosen || candidate.support > 1) {
    return voteSummary(candidate.support, classes);
  }
  const agree = candidate.checks?.find(c => c.name === 'agree');
  if (!agree?.detail || !classes.length) {
    return null;
  }
  return {
    text: agree.detail,
    title:
      'Samples whose outputs were the same answer as this one, of all that voted' +
      (agree.passed ? '.' : ': the vote picked another answer.')
  };
}

/** What each evidence check looks at, in words (``search.evidence.CHECKS``). */
const CHECK_WORDS: Record<string, string> = {
  rows: 'rows lost or duplicated',
  nan: 'NaN introduced',
  dtype: 'numbers turned into text',
  empty: 'empty result or constant column',
  index: 'unique index lost',
  range: 'values out of the observed range',
  type: 'answer type',
  plausible: 'plausible values',
  agree: 'agreement with other answers'
};

/**
 * The evidence checks as words: a short line, e.g. "checks 7/8 · NaN introduced",
 * and its details (every check, with what a failed one found). Null without checks.
 */
export function checksSummary(
  checks: readonly Check[] | undefined
): { text: string; title: string } | null {
  if (!checks || !checks.length) {
    return null;
  }
  const failed = checks.filter(c => !c.passed);
  const passed = checks.length - failed.length;
  const words = (c: Check) => CHECK_WORDS[c.name] ?? c.name;
  const text =
    `checks ${passed}/${checks.length}` +
    (failed.length ? ` · ${failed.map(words).join(', ')}` : '');
  const title = checks
    .map(
      c =>
        `${c.passed ? '✓' : '✗'} ${words(c)}` +
        (c.detail ? `: ${c.detail}` : '')
    )
    .join('\n');
  return { text, title };
}

export function CandidateView(props: {
  candidate: Candidate;
  index: number;
  total: number;
  chosen: boolean;
  /** Sizes of the turn's answer classes that voted; empty: no vote. */
  classes: readonly number[];
  rendermime: IRenderMimeRegistry;
  confinement: Confinement | null;
}) {
  const { candidate, rendermime, confinement } = props;
  const executed = !confinement || confinement.execute;
  const steps = candidate.steps.filter(s => s.explanation);
  const facts: { text: string; title?: string; className?: string }[] = [];
  if (props.chosen && props.total > 1) {
    facts.push({ text: 'chosen' });
  }
  if (candidate.score !== null) {
    facts.push({ text: `score ${candidate.score.toFixed(2)}` });
  }
  // A support above 1 means the candidate voted; the chosen one won the vote;
  // another says what its agreement check found.
  const vote = agreementSummary(candidate, props.chosen, props.classes);
  if (vote) {
    facts.push(vote);
  } else if (candidate.support > 1) {
    facts.push({ text: `support ${candidate.support}` });
  }
  if (candidate.repaired) {
    facts.push({ text: 'repaired' });
  }
  const checks = executed ? checksSummary(candidate.checks) : null;
  if (checks) {
    facts.push({
      ...checks,
      className: candidate.checks.some(c => !c.passed)
        ? 'jp-DataAgent-checks jp-mod-flagged'
        : 'jp-DataAgent-checks'
    });
  }
  const changes = executed ? namespaceChanges(candidate.namespace) : '';
  const badge = resultBadge(candidate, executed);
  const resultStatus = executed ? (candidate.result?.status ?? 'none') : 'none';
  return (
    <div className="jp-DataAgent-candidate" data-index={props.index}>
      <div className="jp-DataAgent-candidateHead">
        <span className={`jp-DataAgent-status jp-mod-${resultStatus}`}>
          {badge || 'not run'}
        </span>
        {facts.length > 0 && (
          <span className="jp-DataAgent-facts">
            {facts.map((fact, i) => (
              <React.Fragment key={i}>
                {i > 0 && ' · '}
                {fact.title ? (
                  <span
                    className={fact.className ?? 'jp-DataAgent-vote'}
                    title={fact.title}
                    tabIndex={fact.className ? 0 : undefined}
                    aria-label={
                      fact.className ? `${fact.text}. ${fact.title}` : undefined
                    }
                  >
                    {fact.text}
                  </span>
                ) : (
                  fact.text
                )}
              </React.Fragment>
            ))}
          </span>
        )}
      </div>
      <ChangesLine changes={changes} />
      <Explanation
        steps={steps}
        explanation={candidate.explanation}
        rendermime={rendermime}
      />
      {typeof candidate.meta?.not_repaired === 'string' && (
        <p className="jp-DataAgent-note jp-DataAgent-notRepaired">
          {candidate.meta.not_repaired}
        </p>
      )}
      <CodeBlock code={candidate.code} rendermime={rendermime} />
      <OutputPreview
        candidate={candidate}
        rendermime={rendermime}
        confinement={confinement}
      />
    </div>
  );
}
