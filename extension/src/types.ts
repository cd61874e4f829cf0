/**
 * Interfaces mirroring the JSON of the server extension's REST API
 * (dist_notebook/server/routes.py documents the routes).
 */

/** The state of one rank's engine. */
export type RankState = 'idle' | 'running' | 'done' | 'failed' | 'dead';

/** The state of a training run. */
export type RunState = 'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled';

/** One rank of a cluster: an ipyparallel engine with its torch rank. */
export interface IRankModel {
  rank: number;
  host: string | null;
  pid: number | null;
  device: string | null;
  state: RankState;
  engine_id?: number | null;
}

/** A cluster as GET clusters answers it. */
export interface IClusterModel {
  id: string;
  /** starting, running, stopped, failed, ... */
  state: string;
  backend: string | null;
  n: number;
  started: number;
  stopped: number | null;
  kernel_pid: number | null;
  ranks: IRankModel[];
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
  state: string;
  error: string | null;
}

/** A run as GET runs/<id> answers it. */
export interface IRunDetailModel extends IRunModel {
  code: string | null;
  ranks: IRunRankModel[];
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

/**
 * One metrics record: sequence number, rank, step and time, plus the values the
 * rank reported (loss, samples, samples_per_s, step_time, comm_share, gpu_mem, ...).
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
  records: IMetricRecord[];
}

/** The answer of POST clusters/<id>/interrupt and clusters/<id>/stop. */
export interface IActionReply {
  id: string;
  action: ClusterAction;
  state: string;
}

export type ClusterAction = 'interrupt' | 'stop';
