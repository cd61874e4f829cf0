import './base.css';
import './chart.css';
