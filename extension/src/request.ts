/**
 * All HTTP of the extension: typed calls on the server extension's REST API.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type {
  ClusterAction,
  IActionReply,
  IClusterModel,
  IDeleteReply,
  IMetricsPage,
  IPruneReply,
  IRunDetailModel,
  IRunModel
} from './contracts';
import type { IRunSummary } from './protocol';

const API_PATH = 'dist-notebook/api';

/**
 * What the panel says when the Jupyter server answers the API with its own 404 page: the
 * labextension is installed in the server's environment but the server extension is not
 * loaded there (a hub's server image, an extension disabled, a server not restarted).
 */
export const NO_SERVER_EXTENSION =
  "This Jupyter server has no dist-notebook server extension: run pip install dist-notebook in the server's environment (or jupyter server extension enable dist_notebook.server there), then restart the server.";

/**
 * Call the API at *endpoint* (relative to `{base_url}/dist-notebook/api/`) and parse
 * its JSON answer; a non-2xx answer raises `ServerConnection.ResponseError` with the
 * server's message.
 */
export async function requestAPI<T>(
  endpoint: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_PATH, endpoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: unknown = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      // not JSON: an HTML error page from a proxy or a server without the extension
    }
  }
  const ours = typeof data === 'object' && data !== null && 'message' in data;
  if (response.status === 404 && !ours) {
    // every answer of our handlers is JSON with a message, their 404s too
    throw new ServerConnection.ResponseError(response, NO_SERVER_EXTENSION);
  }
  if (!response.ok) {
    const message =
      typeof data === 'object' && data !== null && 'message' in data
        ? String((data as { message: unknown }).message)
        : `${response.status} ${response.statusText}`;
    throw new ServerConnection.ResponseError(response, message);
  }
  return data as T;
}

function query(params: Record<string, string | number | undefined>): string {
  const entries = Object.entries(params).filter(([, v]) => v !== undefined);
  if (entries.length === 0) {
    return '';
  }
  return (
    '?' +
    entries
      .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`)
      .join('&')
  );
}

const id = (value: string): string => encodeURIComponent(value);

export function fetchClusters(): Promise<IClusterModel[]> {
  return requestAPI<IClusterModel[]>('clusters');
}

export function fetchRuns(
  filter: { cluster?: string; state?: string } = {}
): Promise<IRunModel[]> {
  return requestAPI<IRunModel[]>('runs' + query(filter));
}

export function fetchRun(runId: string): Promise<IRunDetailModel> {
  return requestAPI<IRunDetailModel>(`runs/${id(runId)}`);
}

export function fetchMetrics(runId: string, since: number): Promise<IMetricsPage> {
  return requestAPI<IMetricsPage>(`runs/${id(runId)}/metrics` + query({ since }));
}

/** The run's derived measures, computed by the server (dist_notebook/protocol.py). */
export function fetchSummary(runId: string): Promise<IRunSummary> {
  return requestAPI<IRunSummary>(`runs/${encodeURIComponent(runId)}/summary`);
}

export function postClusterAction(
  clusterId: string,
  action: ClusterAction
): Promise<IActionReply> {
  return requestAPI<IActionReply>(`clusters/${id(clusterId)}/${action}`, {
    method: 'POST'
  });
}

/** Delete a run that ended, with its records. */
export function deleteRun(runId: string): Promise<IDeleteReply> {
  return requestAPI<IDeleteReply>(`runs/${id(runId)}`, { method: 'DELETE' });
}

/** Delete the ended runs started before *before* (seconds since the epoch). */
export function pruneRuns(before: number): Promise<IPruneReply> {
  return requestAPI<IPruneReply>('runs/prune', {
    method: 'POST',
    body: JSON.stringify({ before })
  });
}
