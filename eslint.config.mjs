// ESLint as in jupyterlab/extension-template (flat config), with the UI tests
// linted too. Generated files (src/wire.ts) and built output are ignored.
// Product code has a size budget: files of at most 600 lines, functions of
// at most 120.
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';
import prettierRecommended from 'eslint-plugin-prettier/recommended';
import globals from 'globals';
import jupyterPlugin from '@jupyter/eslint-plugin';

export default defineConfig([
  {
    ignores: [
      'node_modules',
      '**/node_modules',
      'dist',
      'lib',
      'coverage',
      '**/*.js',
      '**/*.d.ts',
      '.venv',
      'jupyter_data_agent',
      'src/wire.ts',
      'ui-tests/test-results',
      'ui-tests/playwright-report'
    ]
  },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    plugins: {
      jupyter: jupyterPlugin
    }
  },
  jupyterPlugin.configs.recommended,
  {
    // the Node MCP client driven by tests/test_mcp_node.py
    files: ['tests/**/*.mjs'],
    languageOptions: { globals: { ...globals.node } }
  },
  {
    files: ['**/*.ts', '**/*.tsx'],
    languageOptions: {
      globals: {
        ...globals.browser,
        ...globals.es2015,
        ...globals.node
      },
      parserOptions: {
        sourceType: 'module'
      }
    },
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: {
            regex: '^I[A-Z]',
            match: true
          }
        }
      ],
      '@typescript-eslint/no-unused-vars': ['warn', { args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-namespace': 'off',
      '@typescript-eslint/no-use-before-define': 'off',
      // The extension is not translated yet (no ITranslator): its strings are plain.
      'jupyter/no-untranslated-string': 'off',
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error'
    }
  },
  {
    // The extension's own code is type-checked against its tsconfig.
    files: ['src/**/*.ts', 'src/**/*.tsx'],
    ignores: ['src/**/__tests__/**'],
    languageOptions: {
      parserOptions: {
        project: 'tsconfig.json'
      }
    },
    // A size budget for product code (tests are exempt): every line counts,
    // blank and comment lines too, so the numbers mean what `wc -l` says.
    rules: {
      'max-lines': [
        'error',
        { max: 600, skipBlankLines: false, skipComments: false }
      ],
      'max-lines-per-function': [
        'error',
        { max: 120, skipBlankLines: false, skipComments: false, IIFEs: true }
      ]
    }
  },
  prettierRecommended
]);
