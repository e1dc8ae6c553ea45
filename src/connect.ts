/**
 * "Connect a model": the model's name in the sidebar, and the server
 * requests of the dialog (server/connect_handlers.py). The server looks for
 * the OpenAI-compatible servers (the browser may be on another machine, and
 * its page could not read them anyway), checks a model with a real
 * one-token request and writes the setting. An API key typed in the dialog
 * goes to the server in a request body only; no reply carries it back.
 */
import { requestAPI } from './handler';
import type {
  ConnectCheck,
  Connected,
  ConnectRequest,
  ModelInfo,
  ModelServer,
  ModelServers
} from './wire';

/** "SmolLM2-135M-Instruct, embedded, small and weak at code"; '' while unknown. */
export function modelLine(info: ModelInfo | null | undefined): string {
  if (!info) {
    return '';
  }
  return [info.name, info.kind, info.note].filter(Boolean).join(', ');
}

/** A model one may pick in the dialog: where it is served, and its name. */
export interface IModelChoice {
  base_url: string;
  model: string;
  label: string;
}

/** Every model of the servers that answered, in the servers' order. */
export function modelChoices(servers: ModelServer[]): IModelChoice[] {
  return servers.flatMap(server =>
    server.models.map(model => ({
      base_url: server.base_url,
      model,
      label: server.label
    }))
  );
}

/**
 * The places looked at where nothing answered, as one sentence (the
 * details are each server's `error`): "Nothing found: LM Studio, vLLM."
 */
export function notFound(servers: ModelServer[]): string {
  const missing = servers.filter(s => !s.models.length).map(s => s.label);
  return missing.length ? `Nothing found: ${missing.join(', ')}.` : '';
}

/** The same choice (a server's base URL and a model name). */
export function sameChoice(
  a: IModelChoice | null,
  b: IModelChoice | null
): boolean {
  return !!a && !!b && a.base_url === b.base_url && a.model === b.model;
}

/** The OpenAI-compatible servers on the server's machine (its usual ports). */
export function findServers(): Promise<ModelServers> {
  return requestAPI<ModelServers>('connect/servers');
}

function post<T>(path: string, body: ConnectRequest): Promise<T> {
  return requestAPI<T>(path, { method: 'POST', body: JSON.stringify(body) });
}

/** What the server at a typed base URL serves. */
export function listModels(body: ConnectRequest): Promise<ModelServers> {
  return post<ModelServers>('connect/models', body);
}

/** A real one-token chat request to the chosen model. */
export function checkModel(body: ConnectRequest): Promise<ConnectCheck> {
  return post<ConnectCheck>('connect/check', body);
}

/** Check once more, write the setting, and use it from now on. */
export function connectModel(body: ConnectRequest): Promise<Connected> {
  return post<Connected>('connect', body);
}
