/**
 * Interfaces mirroring the JSON of the server extension's REST API
 * (dist_notebook/server/routes.py documents the routes). States and the record come
 * from the contract (./protocol, generated from dist_notebook/protocol.py).
 */
import type {
  ClusterState,
  EngineState,
  IRecord,
  RunRankState,
  RunState
} from './protocol';

export type { ClusterState, EngineState, RunRankState, RunState };

// Cluster states with no processes left (the history), and those of a run still going:
// stated once in dist_notebook/protocol.py, generated into protocol.ts.
export { ACTIVE_RUN_STATES, ENDED_CLUSTER_STATES } from './protocol';

/** One rank of a cluster: an ipyparallel engine with its torch rank. */
export interface IRankModel {
  rank: number;
  host: string | null;
  pid: number | null;
  device: string | null;
  state: EngineState;
  engine_id?: number | null;
  /** The rank's node (its host's place in node order); null in stores before it. */
  node_rank?: number | null;
}

/** A cluster as GET clusters answers it. */
export interface IClusterModel {
  id: string;
  state: ClusterState;
  backend: string | null;
  n: number;
  started: number;
  stopped: number | null;
  kernel_pid: number | null;
  /** A detached cluster's keeper (it outlives kernels): null for a kernel's own. */
  detached?: IDetachedModel | null;
  ranks: IRankModel[];
}

/** What the store says of a detached cluster's keeper. */
export interface IDetachedModel {
  keeper: number;
  /** Seconds unused before the keeper stops the cluster; null: never. */
  idle_timeout: number | null;
}

/** A run as GET runs lists it. */
export interface IRunModel {
  id: string;
  name: string;
  cluster_id: string;
  state: RunState;
  started: number;
  ended: number | null;
  steps: number | null;
  error: string | null;
}

/** The state of one rank in one run. */
export interface IRunRankModel {
  rank: number;
  state: RunRankState;
  error: string | null;
}

/** A run as GET runs/<id> answers it. */
export interface IRunDetailModel extends IRunModel {
  code: string | null;
  ranks: IRunRankModel[];
  /** The flags the run was started with (`%%dist_train --name ...`). */
  flags?: string | null;
  /** The last lines of each rank's output, by rank. */
  output?: { [rank: string]: string };
  /** Where the run was exported (%%dist_train --tensorboard / --mlflow, load_run(...).to_*()). */
  exports?: IExportModel[];
}

/** One export of a run: a TensorBoard log directory or an MLflow run. */
export interface IExportModel {
  tool: 'tensorboard' | 'mlflow';
  /** The run directory (TensorBoard) or the tracking URI (MLflow). */
  location: string;
  /** A web address to open, when the tool serves one (an MLflow tracking server). */
  url: string | null;
  /** The command that shows it, e.g. `tensorboard --logdir DIR`. */
  command?: string;
  run_id?: string;
}

/** A record as GET runs/<id>/metrics carries it: the protocol's, with its sequence. */
export type ISeqRecord = IRecord & { seq: number };

/**
 * A record of version 1 of the API: the user's metrics beside the system fields. The
 * series still read it (series.ts); the server sends ISeqRecord.
 */
export interface IMetricRecord {
  seq: number;
  rank: number;
  step: number | null;
  time: number;
  [metric: string]: number | string | boolean | null | undefined;
}

/** The answer of GET runs/<id>/metrics?since=<seq>. */
export interface IMetricsPage {
  run: string;
  since: number;
  last_seq: number;
  /** True when the answer was cut at its limit: ask again at once. */
  more: boolean;
  records: ISeqRecord[];
}

/** The answer of POST clusters/<id>/interrupt and clusters/<id>/stop. */
export interface IActionReply {
  id: string;
  action: ClusterAction;
  state: ClusterState;
  /** Who acted: the owning kernel, the server (its kernel is gone), or none (ended). */
  via: 'kernel' | 'server' | 'none';
  /** The kernel's word on what it did, e.g. "run digits cancelled". */
  result?: string;
  warning?: string;
}

/** The answer of POST runs/prune. */
export interface IPruneReply {
  runs: number;
  clusters: number;
}

export type ClusterAction = 'interrupt' | 'stop';
