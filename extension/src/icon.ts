import { LabIcon } from '@jupyterlab/ui-components';

/** Four ranks joined in a ring: the panel's tab icon. */
const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <circle cx="12" cy="4" r="2.6"/>
    <circle cx="20" cy="12" r="2.6"/>
    <circle cx="12" cy="20" r="2.6"/>
    <circle cx="4" cy="12" r="2.6"/>
    <path d="M13.6 5.6l4.8 4.8-1 1-4.8-4.8zM18.4 13.6l-4.8 4.8-1-1 4.8-4.8zM10.4 18.4l-4.8-4.8 1-1 4.8 4.8zM5.6 10.4l4.8-4.8 1 1-4.8 4.8z"/>
  </g>
</svg>`;

export const distIcon = new LabIcon({ name: 'dist-notebook:icon', svgstr });
