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
 * text/html, `.dist-notebook-live-note`): it is shown in place of the error.
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

/** Replace every live view whose model is gone by the kernel's note on its run. */
export function showNotesForMissing(panel: NotebookPanel): number {
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
      if (note === null || !area.widgets[i].node.textContent?.includes(MISSING)) {
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
  const observer = new MutationObserver(() => {
    if (timer === null) {
      timer = window.setTimeout(() => {
        timer = null;
        showNotesForMissing(panel);
      }, 300);
    }
  });
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
