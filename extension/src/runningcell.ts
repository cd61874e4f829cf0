/**
 * A page reloaded (or opened in a second tab) while a plain `%%dist_train` blocks: the
 * running cell shows `[*]`.
 *
 * JupyterLab marks a cell running only in the page that sent it; a reloaded page loads
 * the notebook from its file and shows that cell as `[ ]:` (or its saved count) though the
 * kernel is busy with it. The kernel knows the running cell (JupyterLab sends its id in the
 * execute request's metadata, `cellId`): while a live view's route is open it answers a
 * comm of `dist_notebook.running` with `{cell_id}` on a subshell, at once, however long the
 * cell blocks (dist_notebook/display/uipoll.py, `BlockedCell`). So when a notebook's
 * kernel reads busy and none of its cells runs in this page, this asks, and marks that
 * cell running until the kernel reads idle (for a while: a subshell's idle is followed by
 * the cell's busy at once).
 *
 * Optional, as this labextension is: without it, the status bar still says Busy through
 * the cell (that is the kernel's doing), and the reloaded cell shows its saved prompt.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICodeCellModel } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';

/** The kernel's comm target that answers which cell runs (uipoll.RUNNING_TARGET). */
export const RUNNING_TARGET = 'dist_notebook.running';
/** How long the kernel must read idle before the mark goes (ms). */
const IDLE_SETTLE = 500;
/** How long to wait for a comm's subshell before opening it anyway (ms). */
const SUBSHELL_WAIT = 1500;

/** The code cell of *panel* whose id is *id*, or null. */
export function cellById(panel: NotebookPanel, id: string): ICodeCellModel | null {
  const cells = panel.content.model?.cells;
  if (!cells || !id) {
    return null;
  }
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.id === id && cell.type === 'code') {
      return cell as ICodeCellModel;
    }
  }
  return null;
}

/** Whether a cell of *panel* runs as this page knows it (it sent the cell itself). */
function anyRunning(panel: NotebookPanel): boolean {
  const cells = panel.content.model?.cells;
  if (!cells) {
    return false;
  }
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type === 'code' && (cell as ICodeCellModel).executionState === 'running') {
      return true;
    }
  }
  return false;
}

/** The id of the cell *kernel* runs, as its answer says ("" for none or no answer). */
export async function askRunningCell(
  kernel: Kernel.IKernelConnection
): Promise<string> {
  const comm = kernel.createComm(RUNNING_TARGET);
  const answer = new Promise<string>(resolve => {
    comm.onMsg = msg => {
      const data = msg.content.data as { cell_id?: unknown };
      resolve(typeof data.cell_id === 'string' ? data.cell_id : '');
    };
    // no such target (no blocking run): the kernel closes the comm at once
    comm.onClose = () => resolve('');
  });
  // A subshell of its own (JupyterLab's default) answers even where the kernel's route
  // is gone; the kernel's route answers a comm_open sent before it as well.
  // (`subshellStarted` is on services' CommHandler, not yet on its IComm interface)
  const started = (comm as { subshellStarted?: Promise<void> }).subshellStarted;
  await Promise.race([
    started ?? Promise.resolve(),
    new Promise(resolve => window.setTimeout(resolve, SUBSHELL_WAIT))
  ]).catch(() => undefined);
  if (comm.isDisposed) {
    return '';
  }
  comm.open({});
  return answer;
}

/** Watch *panel*'s kernel: mark the cell it runs for another page. */
export function watchRunningCell(panel: NotebookPanel): void {
  let marked: ICodeCellModel | null = null;
  let asked = false; // once per busy time
  let settle: number | null = null;

  const unmark = () => {
    if (marked !== null && marked.executionState === 'running') {
      marked.executionState = 'idle';
    }
    marked = null;
    asked = false;
  };
  const ask = async (kernel: Kernel.IKernelConnection) => {
    asked = true;
    await panel.context.ready;
    const id = await askRunningCell(kernel).catch(() => '');
    const cell = cellById(panel, id);
    if (cell === null || kernel.status !== 'busy' || anyRunning(panel)) {
      return;
    }
    cell.executionState = 'running';
    marked = cell;
  };
  const onStatus = () => {
    const kernel = panel.sessionContext.session?.kernel;
    if (!kernel || panel.isDisposed) {
      return;
    }
    if (kernel.status === 'busy') {
      if (settle !== null) {
        window.clearTimeout(settle);
        settle = null;
      }
      if (!asked && marked === null && !anyRunning(panel)) {
        void ask(kernel);
      }
      return;
    }
    if (settle === null) {
      settle = window.setTimeout(() => {
        settle = null;
        if (panel.sessionContext.session?.kernel?.status !== 'busy') {
          unmark();
        }
      }, IDLE_SETTLE);
    }
  };
  panel.sessionContext.statusChanged.connect(onStatus);
  panel.sessionContext.kernelChanged.connect(() => {
    unmark();
    onStatus();
  });
  onStatus();
}

export const runningCellPlugin: JupyterFrontEndPlugin<void> = {
  id: 'dist-notebook:running-cell',
  description: 'Marks the cell a blocking run holds as running in a reloaded page.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_sender, panel) => watchRunningCell(panel));
  }
};
