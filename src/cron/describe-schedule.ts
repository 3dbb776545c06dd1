/**
 * A cron expression in words for the console ("every 10 seconds", "at 01:30 every day"). It covers
 * the shapes schedules mostly take; anything else is described field by field, never wrongly.
 * Five fields are minute-first, six second-first (as the parser reads them).
 */
const DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const MONTHS = [
  'January',
  'February',
  'March',
  'April',
  'May',
  'June',
  'July',
  'August',
  'September',
  'October',
  'November',
  'December',
];
const NUM = /^\d+$/;

const every = (n: string, unit: string) => (n === '1' ? `every ${unit}` : `every ${n} ${unit}s`);
const pad = (v: string) => v.padStart(2, '0');

function dayPart(dom: string, month: string, dow: string): string | null {
  if (dom === '*' && month === '*' && dow === '*') return 'every day';
  if (dom === '*' && month === '*' && dow === '1-5') return 'on weekdays';
  if (dom === '*' && month === '*' && NUM.test(dow)) return `every ${DAYS[Number(dow) % 7] ?? dow}`;
  if (NUM.test(dom) && month === '*' && dow === '*') return `on day ${dom} of every month`;
  if (NUM.test(dom) && NUM.test(month) && dow === '*')
    return `every year on ${MONTHS[Number(month) - 1] ?? month} ${dom}`;
  return null;
}

export function describeSchedule(expression: string): string {
  const f = expression.trim().split(/\s+/);
  if (f.length !== 5 && f.length !== 6) return `cron ${expression}`;
  const [sec, min, hour, dom, month, dow] = f.length === 6 ? f : ['0', ...f];
  const days = dayPart(dom!, month!, dow!);
  const step = (v: string) => /^\*\/(\d+)$/.exec(v)?.[1] ?? (v === '*' ? '1' : null);
  if (days === 'every day') {
    if (f.length === 6 && step(sec!) && min === '*' && hour === '*') return every(step(sec!)!, 'second');
    if (sec === '0' && step(min!) && hour === '*') return every(step(min!)!, 'minute');
    if (sec === '0' && NUM.test(min!) && step(hour!)) {
      const h = step(hour!)!;
      return min === '0' ? every(h, 'hour') : `${every(h, 'hour')} at minute ${min}`;
    }
  }
  if (days && NUM.test(sec!) && NUM.test(min!) && NUM.test(hour!)) {
    const time = `${pad(hour!)}:${pad(min!)}${sec === '0' ? '' : `:${pad(sec!)}`}`;
    return `at ${time} ${days}`;
  }
  const parts = [
    f.length === 6 ? `second ${sec}` : '',
    `minute ${min}`,
    `hour ${hour}`,
    `day of month ${dom}`,
    `month ${month}`,
    `weekday ${dow}`,
  ].filter(Boolean);
  return `at ${parts.join(', ')}`;
}
