/**
 * The anywidget module of the cell's live view: the ESM the kernel ships over the
 * widget's comm (built into dist_notebook/display/static/live.js by `npm run build:live`),
 * so no front end needs this package's labextension to draw it.
 *
 * `initialize` runs once per model (it keeps the records for every view of it, and asks
 * the kernel for the history); `render` once per view. Each returns its clean-up.
 *
 * anywidget hands `initialize` and each `render` a proxy of its own over the one model
 * (so that each one's listeners go with it), never the same object twice: a store keyed by
 * that object was made again by every view, each with its own `msg:custom` listener and
 * its own hello (every records message handled twice, the history sent twice). The store
 * is found instead by what the proxies share: the model's widget manager (one per kernel
 * connection) and its run id (one live view model a run); where a front end's proxy has
 * no manager, by the proxy itself as before.
 */
import { ILiveModel, LiveRunView, LiveStore } from './widget';

const byManager = new WeakMap<object, Map<string, LiveStore>>();
const byProxy = new WeakMap<ILiveModel, LiveStore>();
/** Stores whose hello the kernel answered (its history, with `reset`). */
const greeted = new WeakSet<LiveStore>();
/** Each store's listener that marks it greeted. */
const greeters = new WeakMap<LiveStore, (msg: { reset?: boolean } | null) => void>();
/**
 * A view says hello again, each second up to HELLO_TRIES times, while the kernel has not
 * answered the store's: a model made before a plain cell's route to the live view's
 * subshell existed sent its hello to the main shell, which reads it only once the cell
 * has ended; meanwhile the kernel gives no history and takes the page for one without
 * widgets (its text progress re-rendered the output every second).
 */
const HELLO_EVERY_MS = 1000;
const HELLO_TRIES = 10;

function keyOf(model: ILiveModel): [Map<string, LiveStore>, string] | null {
  const manager = (model as { widget_manager?: unknown }).widget_manager;
  const runId = String(model.get('run_id') ?? '');
  if (manager === null || typeof manager !== 'object' || runId === '') {
    return null;
  }
  let stores = byManager.get(manager);
  if (stores === undefined) {
    stores = new Map();
    byManager.set(manager, stores);
  }
  return [stores, runId];
}

/** The model's one store, made on first use. */
export function storeOf(model: ILiveModel): LiveStore {
  const key = keyOf(model);
  let store = key === null ? byProxy.get(model) : key[0].get(key[1]);
  if (store === undefined) {
    const made = new LiveStore(model);
    store = made;
    const greeter = (msg: { reset?: boolean } | null): void => {
      if (msg?.reset === true) {
        greeted.add(made);
      }
    };
    greeters.set(made, greeter);
    model.on('msg:custom', greeter);
    if (key === null) {
      byProxy.set(model, store);
    } else {
      key[0].set(key[1], store);
    }
  }
  return store;
}

/** The model's store is gone (its model closed or made again). */
export function dropStore(model: ILiveModel, store: LiveStore): void {
  store.dispose();
  const greeter = greeters.get(store);
  if (greeter !== undefined) {
    model.off('msg:custom', greeter);
  }
  const key = keyOf(model);
  if (key !== null && key[0].get(key[1]) === store) {
    key[0].delete(key[1]);
  }
  byProxy.delete(model);
}

export default {
  initialize({ model }: { model: ILiveModel }): () => void {
    const store = storeOf(model);
    return () => dropStore(model, store);
  },
  render({ model, el }: { model: ILiveModel; el: HTMLElement }): () => void {
    const store = storeOf(model);
    const view = new LiveRunView(model, store, el);
    let tries = 0;
    const timer = setInterval(() => {
      tries += 1;
      if (greeted.has(store) || tries > HELLO_TRIES) {
        clearInterval(timer);
      } else {
        model.send({ kind: 'hello' });
      }
    }, HELLO_EVERY_MS);
    return () => {
      clearInterval(timer);
      view.dispose();
    };
  }
};
