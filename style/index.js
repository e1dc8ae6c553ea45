import './base.css';
import './connect.css';
