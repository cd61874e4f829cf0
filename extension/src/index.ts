/**
 * dist-notebook's JupyterLab extension: a side panel with the clusters, their ranks,
 * the current run's live loss curve and the run history, over the server extension's
 * REST API.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  InputDialog,
  MainAreaWidget,
  showDialog,
  showErrorMessage,
  WidgetTracker
} from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { CommandIDs } from './commands';
import { distIcon } from './icon';
import { finalSavePlugin } from './finalsave';
import { DistModel, RunModel } from './model';
import { DistPanel } from './panel';
import { OverlayView } from './overlay';
import { deleteRun, postClusterAction, pruneRuns } from './request';
import { RunView } from './runview';
import { runningCellPlugin } from './runningcell';
import type { ClusterAction } from './contracts';

const PLUGIN_ID = 'dist-notebook:plugin';
const PANEL_ID = 'dist-notebook-panel';
const CATEGORY = 'Distributed Training';

interface ISettings {
  pollInterval: number;
}

const DEFAULTS: ISettings = { pollInterval: 1000 };

const CONFIRM: Record<ClusterAction, { title: string; body: string; label: string }> = {
  interrupt: {
    title: 'Interrupt cluster',
    body: "Interrupt cluster %s through its kernel? A training run is cancelled (as the kernel's interrupt does); the ranks keep their state.",
    label: 'Interrupt'
  },
  stop: {
    title: 'Stop cluster',
    body: 'Stop cluster %s as %dist_cluster stop in its kernel? A training run is cancelled, the engines exit, and everything defined on them is lost.',
    label: 'Stop'
  }
};

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Clusters, ranks, live loss curves and run history of dist-notebook.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, ISettingRegistry],
  activate: async (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null
  ) => {
    const settings: ISettings = { ...DEFAULTS };
    const model = new DistModel({ interval: settings.pollInterval });
    const panel = new DistPanel({ model, commands: app.commands });
    panel.id = PANEL_ID;
    panel.title.icon = distIcon;
    panel.title.caption = 'Distributed training';
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, PANEL_ID);

    const tracker = new WidgetTracker<MainAreaWidget<RunView>>({
      namespace: 'dist-notebook-run'
    });

    app.commands.addCommand(CommandIDs.showPanel, {
      label: 'Show Distributed Training Panel',
      icon: distIcon,
      execute: () => app.shell.activateById(PANEL_ID)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Distributed Training Panel',
      execute: () => model.refresh()
    });

    const act = async (action: ClusterAction, clusterId: string): Promise<void> => {
      const text = CONFIRM[action];
      const answer = await showDialog({
        title: `${text.title} ${clusterId}`,
        body: text.body.replace('%s', clusterId),
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: text.label })]
      });
      if (!answer.button.accept) {
        return;
      }
      try {
        await postClusterAction(clusterId, action);
      } catch (error) {
        await showErrorMessage(`${text.title} ${clusterId} failed`, error as Error);
      }
      await model.refresh();
    };
    app.commands.addCommand(CommandIDs.interruptCluster, {
      label: args =>
        args.clusterId ? `Interrupt Cluster ${args.clusterId}` : 'Interrupt Cluster',
      execute: args => act('interrupt', String(args.clusterId))
    });
    app.commands.addCommand(CommandIDs.stopCluster, {
      label: args =>
        args.clusterId ? `Stop Cluster ${args.clusterId}` : 'Stop Cluster',
      execute: args => act('stop', String(args.clusterId))
    });

    addRunCommands(app, model, settings.pollInterval);

    app.commands.addCommand(CommandIDs.openRun, {
      label: args => (args.runId ? `Open Run ${args.runId}` : 'Open Run'),
      execute: args => {
        const runId = String(args.runId);
        const open = tracker.find(w => w.content.runId === runId);
        if (open) {
          app.shell.activateById(open.id);
          return open;
        }
        const view = new RunView(
          new RunModel({ runId, interval: settings.pollInterval })
        );
        const widget = new MainAreaWidget({ content: view });
        widget.id = `dist-notebook-run-${runId}`;
        widget.title.label = model.runs.find(r => r.id === runId)?.name ?? runId;
        widget.title.caption = `Run ${runId}`;
        widget.title.icon = distIcon;
        widget.title.closable = true;
        widget.addClass('dn-runview-widget');
        void tracker.add(widget);
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
        return widget;
      }
    });

    if (restorer) {
      void restorer.restore(tracker, {
        command: CommandIDs.openRun,
        args: w => ({ runId: w.content.runId }),
        name: w => w.content.runId
      });
    }
    if (palette) {
      for (const command of [CommandIDs.showPanel, CommandIDs.refresh]) {
        palette.addItem({ command, category: CATEGORY });
      }
    }

    if (settingRegistry) {
      const apply = (loaded: ISettingRegistry.ISettings) => {
        Object.assign(settings, loaded.composite as unknown as ISettings);
        model.interval = settings.pollInterval;
        panel.update();
      };
      try {
        const loaded = await settingRegistry.load(PLUGIN_ID);
        apply(loaded);
        loaded.changed.connect(apply);
      } catch (error) {
        console.warn(`${PLUGIN_ID}: settings not loaded, using defaults`, error);
      }
    }
  }
};

/** Overlay, delete and prune: the run list's actions. */
function addRunCommands(
  app: JupyterFrontEnd,
  model: DistModel,
  interval: number
): void {
  let overlays = 0;
  app.commands.addCommand(CommandIDs.overlayRuns, {
    label: 'Overlay Selected Runs',
    execute: args => {
      const ids = (args.runIds as string[] | undefined) ?? [];
      const runs = model.runs.filter(r => ids.includes(r.id));
      const view = new OverlayView(runs, interval);
      const widget = new MainAreaWidget({ content: view });
      widget.id = `dist-notebook-overlay-${++overlays}`;
      widget.title.label = `Overlay: ${runs.map(r => r.name).join(', ')}`;
      widget.title.icon = distIcon;
      widget.title.closable = true;
      widget.addClass('dn-runview-widget');
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
      return widget;
    }
  });
  app.commands.addCommand(CommandIDs.deleteRuns, {
    label: 'Delete Selected Runs',
    execute: async args => {
      const ids = (args.runIds as string[] | undefined) ?? [];
      const names = model.runs.filter(r => ids.includes(r.id)).map(r => r.name);
      const answer = await showDialog({
        title: `Delete ${ids.length} run${ids.length === 1 ? '' : 's'}`,
        body: `Delete ${names.join(', ')} with all their records? This cannot be undone.`,
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
      });
      if (!answer.button.accept) {
        return;
      }
      for (const runId of ids) {
        try {
          await deleteRun(runId);
        } catch (error) {
          await showErrorMessage('Delete run failed', error as Error);
        }
      }
      await model.refresh();
    }
  });
  app.commands.addCommand(CommandIDs.pruneRuns, {
    label: 'Prune Runs Before a Date',
    execute: async () => {
      const answer = await InputDialog.getText({
        title: 'Delete every ended run started before (YYYY-MM-DD)',
        placeholder: '2026-11-01'
      });
      if (!answer.button.accept || !answer.value) {
        return;
      }
      const before = new Date(answer.value + 'T00:00').getTime() / 1000;
      if (Number.isNaN(before)) {
        await showErrorMessage(
          'Prune runs',
          `${answer.value} is not a date: write it like 2026-11-01`
        );
        return;
      }
      try {
        const pruned = await pruneRuns(before);
        await showDialog({
          title: 'Runs pruned',
          body: `Deleted ${pruned.runs} runs and ${pruned.clusters} stopped clusters.`,
          buttons: [Dialog.okButton()]
        });
      } catch (error) {
        await showErrorMessage('Prune runs failed', error as Error);
      }
      await model.refresh();
    }
  });
}

export default [plugin, finalSavePlugin, runningCellPlugin];
