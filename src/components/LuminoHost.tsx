/**
 * Lumino widgets (rendermime renderers, output areas) hosted in React.
 */
import { Widget } from '@lumino/widgets';
import * as React from 'react';

/**
 * Take down a widget `LuminoHost` attached. When an ancestor unmounts (the
 * sidebar switching notebooks), React may take the host out of the document
 * before this runs, and Lumino's detach then throws "Widget is not
 * attached", which unmounted the whole panel: the detach messages are sent
 * by hand in that case, so the widget and its children still clean up.
 */
export function disposeHosted(widget: Widget): void {
  if (widget.isDisposed) {
    return;
  }
  if (widget.isAttached && !widget.node.isConnected && !widget.parent) {
    widget.processMessage(Widget.Msg.BeforeDetach);
    widget.node.remove();
    widget.processMessage(Widget.Msg.AfterDetach);
  }
  widget.dispose();
}

/** Hosts a Lumino widget (a rendermime renderer, an output area) in React. */
export function LuminoHost(props: {
  make: () => Widget;
  deps: React.DependencyList;
  className?: string;
}) {
  const ref = React.useRef<HTMLDivElement>(null);
  React.useEffect(() => {
    const host = ref.current;
    if (!host) {
      return;
    }
    const widget = props.make();
    if (host.isConnected) {
      Widget.attach(widget, host);
    } else {
      host.appendChild(widget.node);
    }
    return () => disposeHosted(widget);
  }, props.deps);
  return <div ref={ref} className={props.className} />;
}
