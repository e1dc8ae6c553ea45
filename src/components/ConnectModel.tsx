/**
 * The sidebar's model line ("Model: SmolLM2-135M-Instruct, embedded, small
 * and weak at code" and "Connect a model…"), and the body of the "Connect a
 * model" dialog: the servers found on the server's machine and their models,
 * a base URL and key to type, Check (a real one-token request) and Connect
 * (the server writes the setting and uses it). The key typed is sent to the
 * server only, and forgotten here once connected.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import {
  IModelChoice,
  checkModel,
  connectModel,
  findServers,
  listModels,
  modelChoices,
  modelLine,
  notFound,
  sameChoice
} from '../connect';
import type { Connected, ModelInfo, ModelServer } from '../wire';

/** The model that answers, and the way to another one. */
export function ModelLine(props: {
  info: ModelInfo | null;
  connect: (() => void) | null;
}): JSX.Element | null {
  const line = modelLine(props.info);
  if (!line && !props.connect) {
    return null;
  }
  return (
    <div
      className={
        'jp-DataAgent-modelLine' +
        (props.info?.kind === 'embedded' ? ' jp-mod-embedded' : '')
      }
    >
      {line && (
        <span className="jp-DataAgent-modelName" title="The model that answers">
          Model: {line}
        </span>
      )}
      {props.connect && (
        <button
          type="button"
          className="jp-DataAgent-link jp-DataAgent-connectModel"
          title="Use a model served on this machine (Ollama, LM Studio, vLLM, llama.cpp) or an OpenAI-compatible endpoint"
          onClick={props.connect}
        >
          Connect a model…
        </button>
      )}
    </div>
  );
}

type Status = { busy: boolean; ok: boolean | null; text: string };

const IDLE: Status = { busy: false, ok: null, text: '' };

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** One server's models as radio buttons, or what went wrong with it. */
function ServerChoices(props: {
  server: ModelServer;
  choice: IModelChoice | null;
  pick: (choice: IModelChoice) => void;
}) {
  const { server, choice, pick } = props;
  return (
    <fieldset className="jp-DataAgent-connectServer">
      <legend>
        {server.label} <code>{server.base_url}</code>
      </legend>
      {server.error && (
        <div className="jp-DataAgent-connectError" role="alert">
          {server.error}
        </div>
      )}
      {modelChoices([server]).map(option => (
        <label key={option.model} className="jp-DataAgent-connectModelOption">
          <input
            type="radio"
            name="jp-DataAgent-connect-model"
            checked={sameChoice(option, choice)}
            onChange={() => pick(option)}
          />
          {option.model}
        </label>
      ))}
    </fieldset>
  );
}

/** The dialog's state and its requests: look, list, check, connect. */
function useConnect(onConnected: (reply: Connected) => void) {
  const [found, setFound] = React.useState<ModelServer[] | null>(null);
  const [lookError, setLookError] = React.useState('');
  const [typed, setTyped] = React.useState<ModelServer | null>(null);
  const [url, setUrl] = React.useState('');
  const [key, setKey] = React.useState('');
  const [choice, setChoice] = React.useState<IModelChoice | null>(null);
  const [status, setStatus] = React.useState<Status>(IDLE);

  React.useEffect(() => {
    let live = true;
    findServers()
      .then(reply => live && setFound(reply.servers))
      .catch(error => live && setLookError(errorText(error)));
    return () => {
      live = false;
    };
  }, []);

  const pick = (next: IModelChoice) => {
    setChoice(next);
    setStatus(IDLE);
  };
  // The key goes with the typed server's requests only: a server found on
  // this machine is not sent a key meant for a hosted endpoint.
  const request = (c: IModelChoice) => ({
    base_url: c.base_url,
    model: c.model,
    api_key: typed && c.base_url === typed.base_url ? key : ''
  });

  const look = async () => {
    setStatus({ busy: true, ok: null, text: `Asking ${url} for its models…` });
    try {
      const reply = await listModels({ base_url: url, api_key: key });
      setTyped(reply.servers[0] ?? null);
      setStatus(IDLE);
    } catch (error) {
      setTyped(null);
      setStatus({ busy: false, ok: false, text: errorText(error) });
    }
  };
  const check = async () => {
    if (!choice) {
      return;
    }
    setStatus({ busy: true, ok: null, text: `Checking ${choice.model}…` });
    try {
      const reply = await checkModel(request(choice));
      setStatus({ busy: false, ok: reply.ok, text: reply.message });
    } catch (error) {
      setStatus({ busy: false, ok: false, text: errorText(error) });
    }
  };
  const connect = async () => {
    if (!choice) {
      return;
    }
    setStatus({ busy: true, ok: null, text: `Connecting ${choice.model}…` });
    try {
      const reply = await connectModel(request(choice));
      setKey('');
      setStatus({ busy: false, ok: true, text: reply.message });
      onConnected(reply);
    } catch (error) {
      setStatus({ busy: false, ok: false, text: errorText(error) });
    }
  };

  return {
    found,
    lookError,
    typed,
    url,
    setUrl,
    key,
    setKey,
    choice,
    pick,
    status,
    look,
    check,
    connect
  };
}

function ConnectForm(props: {
  onConnected: (reply: Connected) => void;
}): JSX.Element {
  const state = useConnect(props.onConnected);
  const { found, lookError, typed, url, setUrl, key, setKey } = state;
  const { choice, pick, status, look, check, connect } = state;
  const answered = (found ?? []).filter(s => s.models.length);
  const missing = notFound(found ?? []);
  return (
    <div className="jp-DataAgent-connect">
      <p className="jp-DataAgent-connectFound">
        {found === null && !lookError
          ? 'Looking for OpenAI-compatible servers on the server’s machine (Ollama, LM Studio, vLLM, llama.cpp)…'
          : answered.length
            ? 'Found on this machine:'
            : 'No model server found on this machine.'}
      </p>
      {lookError && (
        <div className="jp-DataAgent-connectError" role="alert">
          {lookError}
        </div>
      )}
      {answered.map(server => (
        <ServerChoices
          key={server.base_url}
          server={server}
          choice={choice}
          pick={pick}
        />
      ))}
      {missing && (
        <p
          className="jp-DataAgent-connectMissing"
          title={(found ?? [])
            .filter(s => s.error)
            .map(s => s.error)
            .join('\n')}
        >
          {missing}
        </p>
      )}
      <label className="jp-DataAgent-connectField">
        Or a server’s base URL
        <input
          type="url"
          className="jp-mod-styled jp-DataAgent-connectUrl"
          placeholder="http://127.0.0.1:11434/v1"
          value={url}
          onChange={event => setUrl(event.target.value)}
          onKeyDown={event => {
            if (event.key === 'Enter' && url.trim()) {
              event.preventDefault();
              event.stopPropagation();
              void look();
            }
          }}
        />
      </label>
      <label className="jp-DataAgent-connectField">
        API key, if it needs one (kept on the server, never shown again)
        <input
          type="password"
          autoComplete="off"
          className="jp-mod-styled jp-DataAgent-connectKey"
          value={key}
          onChange={event => setKey(event.target.value)}
        />
      </label>
      <button
        type="button"
        className="jp-Button jp-mod-styled jp-DataAgent-connectLook"
        disabled={!url.trim() || status.busy}
        onClick={() => void look()}
      >
        List its models
      </button>
      {typed && <ServerChoices server={typed} choice={choice} pick={pick} />}
      <div className="jp-DataAgent-connectActions">
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-DataAgent-connectCheck"
          disabled={!choice || status.busy}
          onClick={() => void check()}
        >
          Check
        </button>
        <button
          type="button"
          className="jp-Button jp-mod-styled jp-mod-accept jp-DataAgent-connectUse"
          disabled={!choice || status.busy}
          onClick={() => void connect()}
        >
          Connect
        </button>
      </div>
      {status.text && (
        <div
          className={
            'jp-DataAgent-connectStatus' +
            (status.ok === false ? ' jp-mod-error' : '') +
            (status.ok ? ' jp-mod-ok' : '')
          }
          role="status"
        >
          {status.text}
        </div>
      )}
    </div>
  );
}

/** The dialog's body (JupyterLab's Dialog takes a widget). */
export class ConnectModelBody extends ReactWidget {
  constructor(private _onConnected: (reply: Connected) => void) {
    super();
    this.addClass('jp-DataAgent-connectBody');
  }

  protected render(): JSX.Element {
    return <ConnectForm onConnected={this._onConnected} />;
  }
}
