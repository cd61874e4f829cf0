/**
 * The anywidget module of the cell's live view: the ESM the kernel ships over the
 * widget's comm (built into dist_notebook/display/static/live.js by `npm run build:live`),
 * so no front end needs this package's labextension to draw it.
 *
 * `initialize` runs once per model (it keeps the records for every view of it, and asks
 * the kernel for the history); `render` once per view. Each returns its clean-up.
 */
import { ILiveModel, LiveRunView, LiveStore } from './widget';

const stores = new WeakMap<ILiveModel, LiveStore>();

function storeOf(model: ILiveModel): LiveStore {
  let store = stores.get(model);
  if (store === undefined) {
    store = new LiveStore(model);
    stores.set(model, store);
  }
  return store;
}

export default {
  initialize({ model }: { model: ILiveModel }): () => void {
    const store = storeOf(model);
    return () => {
      store.dispose();
      stores.delete(model);
    };
  },
  render({ model, el }: { model: ILiveModel; el: HTMLElement }): () => void {
    const view = new LiveRunView(model, storeOf(model), el);
    return () => view.dispose();
  }
};
