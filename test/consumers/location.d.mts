/** The consumer projects' directory for the clone at `root`, outside it. */
export function consumersDir(root: string): string
