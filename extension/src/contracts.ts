/**
 * Generated from dist_notebook/contracts.py by `python -m dist_notebook.contracts`
 * (or `make ext-generate`); do not edit (tests/unit/test_contracts.py fails when this
 * file is out of date). The REST API's answers and the live view's widget messages.
 */

import type { ClusterState, EngineState, IRecord, IRunSummary, RunRankState, RunState } from './protocol';

/** A record as GET runs/<id>/metrics carries it: the protocol's, with its sequence. */
export type ISeqRecord = IRecord & { seq: number };

export type ClusterAction = 'interrupt' | 'stop';

export type ActionVia = 'kernel' | 'server' | 'none';

/** One rank of a cluster: an ipyparallel engine with its torch rank. */
export interface IRankModel {
  rank: number;
  host: string | null;
  pid: number | null;
  device: string | null;
  state: EngineState;
  engine_id: number | null;
  /** The rank's node (its host's place in node order); null in stores before it. */
  node_rank: number | null;
}

/** What the store says of a detached cluster's keeper. */
export interface IDetachedModel {
  keeper: number;
  /** Seconds unused before the keeper stops the cluster; null: never. */
  idle_timeout: number | null;
}

/** A cluster as GET clusters and GET clusters/<id> answer it. */
export interface IClusterModel {
  id: string;
  state: ClusterState;
  backend: string | null;
  n: number;
  started: number;
  stopped: number | null;
  kernel_pid: number | null;
  /** A detached cluster's keeper (it outlives kernels): null for a kernel's own. */
  detached: IDetachedModel | null;
  /** Why the server will not interrupt or stop it (a store or profile folder that is not this user's own): the panel shows it without its buttons. Null: they act. */
  read_only: string | null;
  ranks: IRankModel[];
}

/** A run as GET runs lists it (without its code). */
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

/** One export of a run: a TensorBoard log directory or an MLflow run. */
export interface IExportModel {
  tool: 'tensorboard' | 'mlflow';
  /** The run directory (TensorBoard) or the tracking URI (MLflow). */
  location: string;
  /** A web address to open, when the tool serves one (an MLflow tracking server). */
  url: string | null;
  /** The command that shows it, e.g. `tensorboard --logdir DIR`. */
  command?: string;
  /** TensorBoard */
  logdir?: string;
  /** MLflow */
  experiment_id?: string;
  /** MLflow */
  run_id?: string;
}

/** A run as GET runs/<id> answers it: its code, flags, ranks, output and exports. */
export interface IRunDetailModel {
  id: string;
  name: string;
  cluster_id: string;
  state: RunState;
  started: number;
  ended: number | null;
  steps: number | null;
  error: string | null;
  code: string | null;
  ranks: IRunRankModel[];
  /** The flags the run was started with (`%%dist_train --name ...`). */
  flags: string | null;
  /** The last lines of each rank's output, by rank. */
  output: { [name: string]: string };
  /** Where the run was exported, oldest first. */
  exports: IExportModel[];
}

/** The answer of GET runs/<id>/metrics?since=<seq>&limit=<n>. */
export interface IMetricsPage {
  run: string;
  since: number;
  /** Pass as since next time (equal to since when nothing is new). */
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
  via: ActionVia;
  /** The kernel's word on what it did, e.g. "run digits cancelled" (via kernel). */
  result?: string | null;
  /** The store could not record what the server did (via server). */
  warning?: string;
}

/** The answer of DELETE runs/<id>. */
export interface IDeleteReply {
  id: string;
  deleted: boolean;
}

/** The answer of POST runs/prune: how many runs and clusters were deleted. */
export interface IPruneReply {
  runs: number;
  clusters: number;
}

/** The synced traits of the live view's model (display/live.py: LiveRunWidget). */
export interface ILiveTraits {
  name: string;
  run_id: string;
  state: RunState;
  steps: number | null;
  started: number;
  rank_states: { [name: string]: RunRankState };
  /** False where a click cannot reach the kernel while the cell blocks (Stop hidden). */
  stoppable: boolean;
  /** The end's picture and table as HTML, once the run ended ("" before). */
  final: string;
}

/** Kernel -> view: the records that came in since the last message. */
export interface IRecordsMessage {
  kind: 'records';
  records: IRecord[];
  /** Null: keep the last summary (it is sent less often past 64 ranks). */
  summary: IRunSummary | null;
  /** The kernel's time.time() when sent: the view's clock skew. */
  clock: number;
  /** The whole history so far (for a view that came late): drop what you had. */
  reset?: boolean;
}

/** View -> kernel: a new model asks for the history (answered with reset). */
export interface IHelloMessage {
  kind: 'hello';
}

/** View -> kernel: the Stop button (the run is cancelled). */
export interface IStopMessage {
  kind: 'stop';
}

/** What a view sends its kernel. */
export type ViewMessage = IHelloMessage | IStopMessage;

/** The names of LiveTraits: the traits a view listens to. */
export const LIVE_TRAITS: readonly (keyof ILiveTraits)[] = ['name', 'run_id', 'state', 'steps', 'started', 'rank_states', 'stoppable', 'final'];
