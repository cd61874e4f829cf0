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
}
