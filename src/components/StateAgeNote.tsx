/**
 * The kernel state a turn ran on, when it was not the live kernel's: a cell
 * was running, so the turn started at once from the state before it (the
 * kernel's warm root). Kept on the turn, with a button that asks again once
 * the cell has ended (`fresh_state`).
 */
import * as React from 'react';

import { IJobView, isFinished } from '../events';

/** Nothing for a turn on the live kernel's state (`job.stateAge` null). */
export function StateAgeNote(props: {
  job: IJobView;
  /** A request is running (this one or another): no re-ask until it ends. */
  busy: boolean;
  /** Ask the same question again, waiting for the cell. */
  onWaitForCell: () => void;
}) {
  const { job, busy, onWaitForCell } = props;
  const stateAge = job.stateAge;
  if (!stateAge) {
    return null;
  }
  const verb = isFinished(job) ? 'Ran on' : 'Running on';
  const which = stateAge.running
    ? "the kernel's state before your running cell"
    : 'an earlier kernel state';
  const note = stateAge.note.replace(/\.\s*$/, '');
  return (
    <div
      className="jp-DataAgent-stateAge"
      role="note"
      title={`The kernel's state as of ${stateAge.as_of}`}
    >
      <span className="jp-DataAgent-stateAgeText">
        {verb} {which}: {note}.
      </span>
      <button
        type="button"
        className="jp-DataAgent-link jp-DataAgent-waitForCell"
        title={
          busy
            ? 'Available once the running request ends'
            : "Ask the same question again once the kernel's running cell has ended, on the state it leaves"
        }
        disabled={busy}
        onClick={onWaitForCell}
      >
        {stateAge.running
          ? 'Wait for the cell and run again'
          : "Run again on the kernel's state now"}
      </button>
    </div>
  );
}
