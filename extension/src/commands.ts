/**
 * Command ids of the extension, in one namespace.
 */
export namespace CommandIDs {
  /** Show the side panel. */
  export const showPanel = 'dist-notebook:show-panel';
  /** Poll the server now. */
  export const refresh = 'dist-notebook:refresh';
  /** Interrupt the running cell on every rank of a cluster; args: { clusterId }. */
  export const interruptCluster = 'dist-notebook:interrupt-cluster';
  /** Stop a cluster's engines and controller; args: { clusterId }. */
  export const stopCluster = 'dist-notebook:stop-cluster';
  /** Open a run's curves in the main area; args: { runId }. */
  export const openRun = 'dist-notebook:open-run';
  /** Overlay the curves of two or more runs in one tab; args: { runIds }. */
  export const overlayRuns = 'dist-notebook:overlay-runs';
  /** Delete runs that ended, after a confirmation; args: { runIds }. */
  export const deleteRuns = 'dist-notebook:delete-runs';
  /** Delete every ended run started before a date the user picks. */
  export const pruneRuns = 'dist-notebook:prune-runs';
}
