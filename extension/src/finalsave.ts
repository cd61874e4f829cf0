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
 * Optional, as this labextension is: where it is absent, the live view still draws and
 * ends in every view; only such a file keeps the widget's output.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { CodeCell } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';

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
  description: "Saves an ended live view's output as its picture, not as a widget.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_sender, panel) => {
      panel.context.saveState.connect((_context, state) => {
        if (state === 'started') {
          freezeEndedViews(panel);
        }
      });
    });
  }
};
