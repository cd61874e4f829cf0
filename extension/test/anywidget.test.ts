import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import live, { storeOf } from '../src/chart/anywidget';
import type { ILiveModel } from '../src/chart/widget';

/** A Backbone-like model: listeners by event with a context, as the widget base has. */
class FakeModel {
  readonly sent: unknown[] = [];
  private _listeners: { event: string; cb: (...a: any[]) => void; ctx: unknown }[] = [];
  constructor(readonly attrs: { [k: string]: unknown }) {}
  get(name: string): unknown {
    return this.attrs[name];
  }
  on(event: string, cb: (...a: any[]) => void, ctx: unknown): void {
    this._listeners.push({ event, cb, ctx });
  }
  off(event: string | null, cb: unknown, ctx: unknown): void {
    this._listeners = this._listeners.filter(
      l =>
        !(
          (event === null || l.event === event) &&
          (cb === null || cb === undefined || l.cb === cb) &&
          (ctx === undefined || l.ctx === ctx)
        )
    );
  }
  send(content: unknown): void {
    this.sent.push(content);
  }
  trigger(event: string, ...args: unknown[]): void {
    for (const l of [...this._listeners]) {
      if (l.event === event) {
        l.cb(...args);
      }
    }
  }
  listeners(event: string): number {
    return this._listeners.filter(l => l.event === event).length;
  }
}

/** What anywidget 0.9+ hands initialize and each render: a new proxy each time. */
function proxy(
  model: FakeModel,
  manager: object | undefined,
  ctx: unknown
): ILiveModel {
  return {
    get: model.get.bind(model),
    send: model.send.bind(model),
    on: (e: string, cb: (...a: any[]) => void) => model.on(e, cb, ctx),
    off: (e?: string | null, cb?: ((...a: any[]) => void) | null) =>
      model.off(e ?? null, cb ?? null, ctx),
    widget_manager: manager
  } as unknown as ILiveModel;
}

function records(n: number): object {
  const recs = Array.from({ length: n }, (_, i) => ({
    rank: 0,
    step: i,
    time: 100 + i,
    step_time: null,
    comm_time: null,
    samples: null,
    metrics: { loss: 1 / (i + 1) },
    gpu: null
  }));
  return { kind: 'records', records: recs, summary: null, clock: 100 };
}

describe('anywidget entry', () => {
  (globalThis as any).window = globalThis;
  const initialize = live.initialize;

  it('initialize and every view of one model share one store: one hello, one listener', () => {
    const model = new FakeModel({ run_id: 'abc', name: 'r' });
    const manager = {};
    const cleanup = initialize({ model: proxy(model, manager, 'init') });
    const recv: unknown[] = [];
    (globalThis as any).__dnLiveRecv = recv;
    // the views' store is the initialize one (no DOM here: look the store up as render does)
    const a = storeOf(proxy(model, manager, 'view1'));
    const b = storeOf(proxy(model, manager, 'view2'));
    assert.equal(a, b);
    assert.equal(model.sent.filter((m: any) => m.kind === 'hello').length, 1);
    // the store's listener, and the one that notes the kernel's answer to the hello
    assert.equal(model.listeners('msg:custom'), 2);
    model.trigger('msg:custom', records(3));
    assert.equal(recv.length, 1, 'each records message is handled once');
    assert.equal(a.records.length, 3);
    model.trigger('msg:custom', { ...records(2), reset: true }); // the history
    assert.equal(recv.length, 2);
    assert.equal(a.records.length, 2);
    cleanup();
    assert.equal(model.listeners('msg:custom'), 0);
    delete (globalThis as any).__dnLiveRecv;
  });

  it('two runs under one manager have a store each; a model made again gets a new one', () => {
    const manager = {};
    const m1 = new FakeModel({ run_id: 'one' });
    const m2 = new FakeModel({ run_id: 'two' });
    const c1 = initialize({ model: proxy(m1, manager, 'i') });
    const c2 = initialize({ model: proxy(m2, manager, 'i') });
    const s1 = storeOf(proxy(m1, manager, 'v'));
    assert.notEqual(s1, storeOf(proxy(m2, manager, 'v')));
    c1();
    c2();
    const again = new FakeModel({ run_id: 'one' });
    initialize({ model: proxy(again, manager, 'i') });
    assert.notEqual(storeOf(proxy(again, manager, 'v')), s1);
    assert.equal(again.sent.length, 1);
  });

  it('without a widget manager the proxy itself is the key (as before)', () => {
    const model = new FakeModel({ run_id: 'x' });
    const p = proxy(model, undefined, 'i');
    assert.equal(storeOf(p), storeOf(p));
  });
});
