/**
 * Generated from dist_notebook/protocol.py by `python -m dist_notebook.protocol`;
 * do not edit (tests/unit/test_protocol.py fails when this file is out of date).
 */

export const PROTOCOL_VERSION = 2;

export const WINDOW = 20;

export const STRAGGLER_PERSISTENCE = 0.8;

export const STRAGGLER_MIN_SHARE = 0.2;

export const STRAGGLER_MIN_WAIT = 0.002;

export const STRAGGLER_WORK_PERSISTENCE = 0.6;

export const STRAGGLER_MIN_SAMPLES = 10;

/** A float in JSON: a number, or "nan" / "inf" / "-inf" (drawn as gaps). */
export type JsonNumber = number | 'nan' | 'inf' | '-inf';

/** new -> starting -> ready | failed; ready -> degraded (a rank died or hangs) -> restarting -> ready | failed; any live state -> stopping -> stopped; ready -> failed (the controller died); new -> failed (a start refused before it began). A stopped or failed cluster may live again under its id: -> starting. ``orphaned``: the kernel that owned it is gone (the server found it so and stopped its processes). */

export type ClusterState = 'new' | 'starting' | 'ready' | 'degraded' | 'restarting' | 'stopping' | 'stopped' | 'failed' | 'orphaned';

export const CLUSTERSTATE_TRANSITIONS = { new: ['failed', 'starting', 'stopped'], starting: ['failed', 'orphaned', 'ready', 'stopped', 'stopping'], ready: ['degraded', 'failed', 'orphaned', 'restarting', 'stopped', 'stopping'], degraded: ['failed', 'orphaned', 'ready', 'restarting', 'stopped', 'stopping'], restarting: ['failed', 'orphaned', 'ready', 'stopped', 'stopping'], stopping: ['failed', 'stopped'], stopped: ['starting'], failed: ['starting', 'stopped', 'stopping'], orphaned: ['stopped'] };

/** A rank of a cluster: idle <-> busy; -> unresponsive (no heartbeat, e.g. SIGSTOP) -> idle again when it answers; -> dead (its process exited); -> stopped. */

export type EngineState = 'idle' | 'busy' | 'unresponsive' | 'dead' | 'stopped';

export const ENGINESTATE_TRANSITIONS = { idle: ['busy', 'dead', 'stopped', 'unresponsive'], busy: ['dead', 'idle', 'stopped', 'unresponsive'], unresponsive: ['busy', 'dead', 'idle', 'stopped'], dead: ['idle', 'stopped'], stopped: [] };

/** pending -> running -> succeeded | failed | cancelled; a run whose kernel is gone before it ended: orphaned. */

export type RunState = 'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled' | 'orphaned';

export const RUNSTATE_TRANSITIONS = { pending: ['cancelled', 'failed', 'orphaned', 'running'], running: ['cancelled', 'failed', 'orphaned', 'succeeded'], succeeded: [], failed: [], cancelled: [], orphaned: [] };

/** A rank in one run: pending -> running -> done | failed (it raised) | released (freed after another rank failed) | dead (its process died) | cancelled. */

export type RunRankState = 'pending' | 'running' | 'done' | 'failed' | 'released' | 'dead' | 'cancelled';

export const RUNRANKSTATE_TRANSITIONS = { pending: ['cancelled', 'dead', 'done', 'failed', 'released', 'running'], running: ['cancelled', 'dead', 'done', 'failed', 'released'], done: [], failed: [], released: [], dead: [], cancelled: [] };

export const ENDED_CLUSTER_STATES: ReadonlySet<ClusterState> = new Set<ClusterState>(['stopped', 'failed', 'orphaned']);

export const LIVE_CLUSTER_STATES: ReadonlySet<ClusterState> = new Set<ClusterState>(['new', 'starting', 'ready', 'degraded', 'restarting', 'stopping']);

export const ACTIVE_RUN_STATES: ReadonlySet<RunState> = new Set<RunState>(['pending', 'running']);

export const ENDED_RUN_STATES: ReadonlySet<RunState> = new Set<RunState>(['succeeded', 'failed', 'cancelled', 'orphaned']);

/** One record as the REST API and the live chart carry it. */
export interface IRecord {
  seq?: number;
  rank: number;
  step: number | null;
  time: number;
  step_time: JsonNumber | null;
  comm_time: JsonNumber | null;
  samples: JsonNumber | null;
  metrics: { [name: string]: JsonNumber | null };
  gpu: { util?: JsonNumber; mem?: JsonNumber; power?: JsonNumber } | null;
  cpu_time?: JsonNumber | null;
  run_delay?: JsonNumber | null;
  load?: JsonNumber | null;
  cores?: JsonNumber | null;
  data_time?: JsonNumber | null;
  peak_mem?: JsonNumber | null;
}

/** A rank's derived measures. */
export interface IRankSummary {
  rank: number;
  host: string | null;
  records: number;
  last_step: number | null;
  steps_done: number | null;
  last_loss: JsonNumber | null;
  step_time: JsonNumber | null;
  samples_per_s: JsonNumber | null;
  comm_time: JsonNumber | null;
  comm_share: JsonNumber | null;
  outside_comm_time: JsonNumber | null;
  last_time: JsonNumber | null;
  gpu_util: JsonNumber | null;
  gpu_mem: JsonNumber | null;
  gpu_power: JsonNumber | null;
  others_wait: JsonNumber | null;
  waited_for_share: JsonNumber | null;
  straggler: boolean;
  cpu_time: JsonNumber | null;
  run_delay: JsonNumber | null;
  cpu_share: JsonNumber | null;
  load: JsonNumber | null;
  cores: JsonNumber | null;
  data_time: JsonNumber | null;
  data_share: JsonNumber | null;
  peak_mem: JsonNumber | null;
  work_ratio: JsonNumber | null;
  starved: boolean;
}

/** The ranks of one host. */
export interface IHostSummary {
  host: string;
  ranks: number[];
  samples_per_s: JsonNumber | null;
  outside_comm_time: JsonNumber | null;
  straggler: boolean;
}

/** What every view shows of a run. */
export interface IRunSummary {
  run_id: string;
  state: string;
  steps: number | null;
  steps_done: number | null;
  samples_per_s: JsonNumber | null;
  ranks: IRankSummary[];
  hosts: IHostSummary[];
  verdict: string | null;
}
