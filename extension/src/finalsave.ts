/**
 * What a notebook saves of a live view that shows its run's end.
 *
 * The kernel replaces the live view's output by the end's picture through its display id,
 * which only the page that ran the cell knows. A page reloaded (or opened in a second
 * tab) while the run went holds the output from the file: its live view shows the
 * picture (the widget's `final` trait), but the output still names the widget's model,
 * and that file opened later without a kernel would say "Loading widget..." or "model
 * not found". So just before a notebook is saved, each output whose live view shows the
 * end (`.dn-live-final[data-html]`, set by chart/widget.ts) becomes that picture as
 * plain HTML: the saved file opens anywhere, and this page looks the same.
 *
 * A file saved while the run went (an autosave) holds the live view's output; opened once
 * its kernel is gone, the widget manager says "Error displaying widget: model not found".
 * Such an output carries the kernel's note naming the run and `load_run(...)` (its
 * text/html, `.dist-notebook-live-note`, with the id of the kernel that wrote it): it is
 * shown in place of the error, or as soon as another kernel runs the notebook (where the
 * widget manager would say "Loading widget..." for as long as it waits for the model).
 *
 * Optional, as this labextension is: where it is absent, the live view still draws and
 * ends in every view; only such files keep the widget's output.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { CodeCell } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';
const NOTE_CLASS = 'dist-notebook-live-note';
/** What the widget manager writes where a saved output's model is gone. */
const MISSING = 'Error displaying widget';

/** The kernel's note in a live view's output (text/html), or null. */
function noteOf(data: { [mime: string]: unknown }): string | null {
  const markup = data['text/html'];
  const text = Array.isArray(markup) ? markup.join('') : markup;
  return typeof text === 'string' && text.includes(NOTE_CLASS) ? text : null;
}

/** The id of the kernel that wrote *note* (its `data-kernel`), or null. */
function kernelOf(note: string): string | null {
  const found = /data-kernel='([^']*)'/.exec(note);
  return found && found[1] ? found[1] : null;
}

/**
 * Whether the live view of *note*, shown as *shown*, has lost its model: the widget
 * manager says so, the notebook has no kernel session at all (*noKernel*), or it runs
 * another kernel than the one that wrote it (its model cannot be there: the manager would
 * show "Loading widget..." while it waits for it). While a kernel is being connected (a
 * page reloaded mid-run) nothing is said.
 */
function modelGone(
  note: string,
  shown: string,
  current: string | undefined,
  noKernel: boolean
): boolean {
  if (shown.includes(MISSING) || noKernel) {
    return true;
  }
  const writer = kernelOf(note);
  return writer !== null && current !== undefined && writer !== current;
}

/**
 * Whether *panel*'s notebook has no kernel session, neither in this page nor on the server
 * ("No Kernel" picked in the kernel dialog). The widget manager then never restores, not
 * even the notebook's saved widget states (jupyterlab_widgets 3.0: its restore waits for
 * a session context that never gets ready), and says "Loading widget..." for good. A page
 * reloaded mid-run finds its session on the server, and a kernel being started for the
 * notebook is a new one, without the model either.
 */
async function sessionless(panel: NotebookPanel): Promise<boolean> {
  const context = panel.sessionContext;
  if (context.session !== null || context.isDisposed) {
    return false;
  }
  const found = await context.sessionManager.findByPath(context.path);
  return found === undefined && context.session === null;
}

/** The number of live views of ours in *panel* (their outputs, as saved). */
function liveViews(panel: NotebookPanel): number {
  let count = 0;
  for (const cell of panel.content.widgets) {
    if (cell instanceof CodeCell) {
      const outputs = cell.model.outputs;
      for (let i = 0; i < outputs.length; i++) {
        const data = outputs.get(i).data;
        count += WIDGET_MIME in data && noteOf(data) !== null ? 1 : 0;
      }
    }
  }
  return count;
}

/** Replace every live view whose model is gone by the kernel's note on its run. */
export function showNotesForMissing(panel: NotebookPanel, noKernel = false): number {
  const current = panel.sessionContext.session?.kernel?.id;
  let replaced = 0;
  for (const cell of panel.content.widgets) {
    if (!(cell instanceof CodeCell)) {
      continue;
    }
    const outputs = cell.model.outputs;
    const area = cell.outputArea;
    for (let i = 0; i < outputs.length && i < area.widgets.length; i++) {
      const data = outputs.get(i).data;
      const note = WIDGET_MIME in data ? noteOf(data) : null;
      const node = area.widgets[i].node;
      if (
        note === null ||
        // still showing the run's end (its kernel just shut down): a save freezes it
        node.querySelector('.dn-live-final[data-html]') !== null ||
        !modelGone(note, node.textContent ?? '', current, noKernel)
      ) {
        continue;
      }
      const plain = data['text/plain'];
      outputs.set(i, {
        output_type: 'display_data',
        data: {
          'text/html': note,
          'text/plain': typeof plain === 'string' ? plain : ''
        },
        metadata: {}
      });
      replaced += 1;
    }
  }
  return replaced;
}

/** Watch *panel* for a live view whose model is missing (checked once things settle). */
function watchMissing(panel: NotebookPanel): void {
  let timer: number | null = null;
  // "No Kernel" picked in the kernel dialog changes nothing in the panel: while a live
  // view is left and the notebook has no session, look again each second, a while.
  let retries = 0;
  const check = async (): Promise<void> => {
    if (panel.isDisposed || liveViews(panel) === 0) {
      return;
    }
    const none = await sessionless(panel).catch(() => false);
    showNotesForMissing(panel, none);
    if (panel.sessionContext.session === null && liveViews(panel) > 0 && retries < 60) {
      retries += 1;
      schedule(1000);
    }
  };
  const schedule = (delay = 300) => {
    if (timer === null) {
      timer = window.setTimeout(() => {
        timer = null;
        void check();
      }, delay);
    }
  };
  const observer = new MutationObserver(() => schedule());
  panel.sessionContext.kernelChanged.connect(() => schedule());
  observer.observe(panel.content.node, {
    childList: true,
    subtree: true,
    characterData: true
  });
  panel.disposed.connect(() => observer.disconnect());
}

/** Replace, in *panel*'s model, every ended live view's output by its picture. */
export function freezeEndedViews(panel: NotebookPanel): number {
  let replaced = 0;
  for (const cell of panel.content.widgets) {
    if (!(cell instanceof CodeCell)) {
      continue;
    }
    const outputs = cell.model.outputs;
    const area = cell.outputArea;
    for (let i = 0; i < outputs.length && i < area.widgets.length; i++) {
      const output = outputs.get(i);
      if (!(WIDGET_MIME in output.data)) {
        continue;
      }
      const final = area.widgets[i].node.querySelector<HTMLElement>(
        '.dn-live-final[data-html]'
      );
      const html = final?.dataset.html;
      if (!html) {
        continue;
      }
      const title = final?.querySelector('b')?.textContent ?? 'the run ended';
      outputs.set(i, {
        output_type: 'display_data',
        data: { 'text/html': html, 'text/plain': title },
        metadata: {}
      });
      replaced += 1;
    }
  }
  return replaced;
}

export const finalSavePlugin: JupyterFrontEndPlugin<void> = {
  id: 'dist-notebook:final-save',
  description:
    "Saves an ended live view's output as its picture; a missing one's as its note.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_sender, panel) => {
      watchMissing(panel);
      panel.context.saveState.connect((_context, state) => {
        if (state === 'started') {
          freezeEndedViews(panel);
        }
      });
    });
  }
};
